"""Trainer plugins (rm, dpo, grpo, ppo) registered under the `prefdata.trainers` entry-point group."""
