"""PPO's math as small pure torch functions: no model, no config, no I/O. The log-probabilities
they take are prefdata.models.logprobs' (`logprobs_from_logits`), the one implementation.

Shapes: B sequences, T response tokens; `mask` is 1.0 on scored response tokens, 0.0 on padding.
Conventions follow the first seed (rlhf-from-scratch) and Ziegler et al. 2019 / Ouyang et al.
2022, with three fixes to the seed's teaching code: the scalar reward goes at the last *unpadded*
token (the seed adds it at column -1, which is padding for every sequence shorter than the
longest); GAE skips masked steps instead of reading padded values as the next state; and k3 uses
r = p_ref / p_policy (the seed's compare document writes r = p_policy / p_ref, whose mean under
the policy is not the KL).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """sum(x * m) / sum(m), over `dim` or everything; a fully masked row gives 0, not NaN."""
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1.0)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1.0)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """mean_m((x - mean_m(x))^2), times n / (n - 1) when unbiased (n = sum(m))."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    if unbiased:
        n = mask.sum()
        if n < 2:
            raise ValueError(f"an unbiased variance needs at least 2 unmasked values, got {int(n)}")
        var = var * n / (n - 1)
    return var


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean_m(x)) / sqrt(var_m(x) + eps); with shift_mean=False the mean is added back (scale only).

    Masked positions come back as 0 so they never leak into a loss.
    """
    mean, var = masked_mean(x, mask), masked_var(x, mask)
    white = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        white = white + mean
    return white * mask


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """H = -sum_v p_v log p_v = logsumexp(z) - sum_v p_v z_v, per position: [B, T, V] -> [B, T]."""
    logits = logits.float()
    p = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (p * logits).sum(-1)


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k1 = log p(x) - log p_ref(x), per token, x ~ p: unbiased for KL(p || p_ref), can be negative."""
    return logp - ref_logp


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 = (r - 1) - log r with r = p_ref(x) / p(x), per token, x ~ p (Schulman 2020).

    E_p[r - 1] = 0 and E_p[-log r] = KL(p || p_ref), so it is unbiased; r - 1 >= log r makes every
    term >= 0, which gives it a lower variance than k1.
    """
    log_r = ref_logp - logp
    return torch.expm1(log_r) - log_r


KL_ESTIMATORS = {"k1": kl_k1, "k3": kl_k3}


def per_token_kl(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k1") -> torch.Tensor:
    """The per-token KL estimate named by `estimator` ("k1" or "k3")."""
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown kl estimator {estimator!r}; known: {sorted(KL_ESTIMATORS)}")
    return KL_ESTIMATORS[estimator](logp, ref_logp)


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    """Column of the last 1 in each row of `mask` ([B, T] -> [B]); rows must have at least one 1."""
    if (mask.sum(-1) == 0).any():
        raise ValueError("every sequence needs at least one unmasked token to carry its reward")
    cols = torch.arange(mask.size(-1), device=mask.device).expand_as(mask)
    return torch.where(mask.bool(), cols, -1).max(-1).values


def kl_shaped_rewards(scores: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, kl_coef: float) -> torch.Tensor:
    """r_t = -kl_coef * kl_t on every unmasked token, plus the sequence score at its last unmasked token.

    scores [B], kl [B, T], mask [B, T] -> rewards [B, T] (0 on masked tokens).
    """
    rewards = -kl_coef * kl * mask
    rows = torch.arange(mask.size(0), device=mask.device)
    rewards[rows, last_token_index(mask)] += scores.to(rewards.dtype)
    return rewards


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation, backwards over time (Schulman et al. 2016):

        delta_t = r_t + gamma * V_{t+1} - V_t          (V after the last unmasked token is 0: terminal)
        A_t     = delta_t + gamma * lam * A_{t+1}
        R_t     = A_t + V_t                            (the value target)

    Masked steps are skipped: they get A = R = 0 and pass the next state's value and advantage
    through unchanged, so left or right padding gives the same numbers as no padding.
    lam = 0 gives the one-step TD error; lam = 1 gives sum_l gamma^l r_{t+l} - V_t (Monte Carlo).
    """
    mask = mask.to(values.dtype)
    next_value = torch.zeros_like(values[:, 0])
    running = torch.zeros_like(values[:, 0])
    advantages = torch.zeros_like(values)
    for t in range(values.size(1) - 1, -1, -1):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        step = delta + gamma * lam * running
        running = m * step + (1 - m) * running
        next_value = m * values[:, t] + (1 - m) * next_value
        advantages[:, t] = m * step
    returns = (advantages + values) * mask
    return advantages, returns


def clipped_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                        clip_range: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO-clip (Schulman et al. 2017): L = mean_m( max(-A * rho, -A * clip(rho, 1 - eps, 1 + eps)) ),
    rho = exp(logp - old_logp).

    Returns (loss, clip fraction = share of tokens where the clipped term is the larger one, i.e.
    carries no gradient, approx KL(old || new) = mean_m(0.5 * (logp - old_logp)^2)).
    """
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    clip_fraction = masked_mean((clipped > unclipped).float(), mask)
    approx_kl = masked_mean(0.5 * log_ratio.detach() ** 2, mask)
    return loss, clip_fraction.detach(), approx_kl


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
                       clip_range_value: float) -> tuple[torch.Tensor, torch.Tensor]:
    """L_V = 0.5 * mean_m( max((V - R)^2, (V_clip - R)^2) ), V_clip = V_old + clip(V - V_old, -eps_v, eps_v).

    Returns (loss, value clip fraction = share of tokens where the clipped error is the larger one).
    """
    v_clipped = old_values + torch.clamp(values - old_values, -clip_range_value, clip_range_value)
    err = (values - returns) ** 2
    err_clipped = (v_clipped - returns) ** 2
    loss = 0.5 * masked_mean(torch.maximum(err, err_clipped), mask)
    return loss, masked_mean((err_clipped > err).float(), mask).detach()


def ptx_loss(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """The next-token loss of an SFT batch: mean over labelled positions of -log p(label_{t+1} | x_<=t).

    logits [B, L, V] from the model on the full (prompt + completion) ids; labels [B, L] with
    `ignore_index` on prompt and padding, so only completion tokens count (InstructGPT's PPO-ptx).
    """
    shift_logits = logits[:, :-1].float()
    shift_labels = labels[:, 1:]
    return F.cross_entropy(shift_logits.reshape(-1, shift_logits.size(-1)), shift_labels.reshape(-1),
                           ignore_index=ignore_index)


class FixedKLController:
    """A constant KL coefficient beta."""

    def __init__(self, kl_coef: float):
        self.value = kl_coef

    def update(self, current_kl: float, n_steps: int) -> None:
        pass


class AdaptiveKLController:
    """Ziegler et al. 2019, eq. 2: e = clip(KL / target - 1, -0.2, 0.2); beta <- beta * (1 + e * n / horizon).

    KL above the target raises beta (a stronger pull to the reference), below lowers it; `n` is
    the number of samples the KL was measured on, so `horizon` is in samples, not steps.
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: int):
        if target <= 0 or horizon <= 0:
            raise ValueError(f"target ({target}) and horizon ({horizon}) must be > 0")
        self.value = init_kl_coef
        self.target = target
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        if not math.isfinite(current_kl):
            return  # a non-finite KL is the guards' business; never poison beta with it
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon
