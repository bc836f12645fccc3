"""PPO math against numbers worked out by hand in each test, and against TRL where TRL 1.16 still
ships the same piece (entropy, per-token log-probs, the last-token index of its reward scoring)
and transformers (the causal-LM loss the ptx term must equal)."""

from __future__ import annotations

import math

import pytest
import torch

from prefdata.models.logprobs import logprobs_from_logits
from prefdata.trainers.ppo_math import (
    AdaptiveKLController,
    FixedKLController,
    clipped_policy_loss,
    clipped_value_loss,
    entropy_from_logits,
    gae,
    kl_k1,
    kl_k3,
    kl_shaped_rewards,
    last_token_index,
    masked_mean,
    masked_whiten,
    per_token_kl,
    ptx_loss,
)


def close(a, b, tol=1e-6):
    return torch.allclose(torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32), atol=tol)


# --- GAE -----------------------------------------------------------------------------------------
# One episode of 3 response tokens plus one padding column (masked; its numbers must not leak in),
# gamma = 0.9. Row 2 is the same episode left-padded: it must give the same advantages, shifted.
R = torch.tensor([[1.0, 0.0, 2.0, 0.0], [5.0, 1.0, 0.0, 2.0]])
V = torch.tensor([[0.5, 1.0, 1.5, 9.0], [7.0, 0.5, 1.0, 1.5]])
M = torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0]])
GAMMA = 0.9


def test_gae_lambda_0_is_the_one_step_td_error():
    adv, ret = gae(R, V, M, gamma=GAMMA, lam=0.0)
    # A_t = r_t + gamma * V_{t+1} - V_t, and V after the last token is 0 (terminal):
    a0 = 1.0 + 0.9 * 1.0 - 0.5  # 1.4
    a1 = 0.0 + 0.9 * 1.5 - 1.0  # 0.35
    a2 = 2.0 + 0.9 * 0.0 - 1.5  # 0.5 (the padded V = 9.0 is not the next state)
    assert close(adv[0], [a0, a1, a2, 0.0])
    assert close(adv[1], [0.0, a0, a1, a2])
    assert close(ret[0], [a0 + 0.5, a1 + 1.0, a2 + 1.5, 0.0])  # R = A + V: 1.9, 1.35, 2.0
    assert close(ret[1], [0.0, 1.9, 1.35, 2.0])


def test_gae_lambda_1_is_monte_carlo_return_minus_value():
    adv, ret = gae(R, V, M, gamma=GAMMA, lam=1.0)
    # A_t = sum_l gamma^l r_{t+l} - V_t
    a2 = 2.0 - 1.5  # 0.5
    a1 = 0.0 + 0.9 * 2.0 - 1.0  # 0.8
    a0 = 1.0 + 0.9 * 0.0 + 0.81 * 2.0 - 0.5  # 2.12
    assert close(adv[0], [a0, a1, a2, 0.0])
    assert close(adv[1], [0.0, a0, a1, a2])
    # the value target is the discounted return itself: 2.62, 1.8, 2.0
    assert close(ret[0], [1.0 + 0.81 * 2.0, 0.9 * 2.0, 2.0, 0.0])


def test_gae_intermediate_lambda_recursion():
    adv, _ = gae(R, V, M, gamma=GAMMA, lam=0.5)
    # A_t = delta_t + gamma * lam * A_{t+1}, deltas 1.4, 0.35, 0.5 from the lambda-0 test
    a2 = 0.5
    a1 = 0.35 + 0.45 * a2  # 0.575
    a0 = 1.4 + 0.45 * a1  # 1.65875
    assert close(adv[0], [a0, a1, a2, 0.0])


# --- the clipped policy loss ---------------------------------------------------------------------
# eps = 0.2. Each column is one case; old log-prob 0, so ratio = exp(logp).
def test_clipped_policy_loss_values_and_gradients():
    ratio = torch.tensor([[1.5, 0.5, 0.5, 1.5, 1.1, 3.0]])
    adv = torch.tensor([[1.0, -1.0, 1.0, -1.0, 2.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 1.0, 0.0]])  # the last column is padding
    logp = ratio.log().requires_grad_()
    loss, clip_fraction, _ = clipped_policy_loss(logp, torch.zeros_like(logp), adv, mask, clip_range=0.2)
    # per token max(-A * rho, -A * clip(rho, 0.8, 1.2)):
    #  A>0, rho 1.5 > 1.2:  max(-1.5, -1.2) = -1.2 (clipped: no gradient)
    #  A<0, rho 0.5 < 0.8:  max( 0.5,  0.8) =  0.8 (clipped: no gradient)
    #  A>0, rho 0.5:        max(-0.5, -0.8) = -0.5 (unclipped: the loss may still push rho up)
    #  A<0, rho 1.5:        max( 1.5,  1.2) =  1.5 (unclipped: the loss may still push rho down)
    #  A=2, rho 1.1 inside: -2.2
    per_token = [-1.2, 0.8, -0.5, 1.5, -2.2]
    assert close(loss, sum(per_token) / 5)  # -0.32
    assert close(clip_fraction, 2 / 5)
    loss.backward()
    # d(-A * exp(logp)) / dlogp = -A * rho where unclipped, 0 where clipped or masked; / 5 tokens
    assert close(logp.grad, [[0.0, 0.0, -0.5 / 5, 1.5 / 5, -2.2 / 5, 0.0]])


def test_clipped_policy_loss_at_ratio_one_is_the_plain_policy_gradient():
    adv = torch.tensor([[0.3, -0.7]])
    logp = torch.zeros(1, 2, requires_grad=True)
    loss, clip_fraction, approx_kl = clipped_policy_loss(logp, torch.zeros(1, 2), adv, torch.ones(1, 2), 0.2)
    loss.backward()
    assert close(loss, -(0.3 - 0.7) / 2) and close(clip_fraction, 0.0) and close(approx_kl, 0.0)
    assert close(logp.grad, -adv / 2)


def test_clipped_value_loss_values_and_gradients():
    # eps_v = 0.2, V_old = 1.0 everywhere, so V_clip is V limited to [0.8, 1.2]
    values = torch.tensor([[1.5, 1.5, 1.1]], requires_grad=True)
    old = torch.ones(1, 3)
    returns = torch.tensor([[2.0, 1.0, 3.0]])
    loss, clip_fraction = clipped_value_loss(values, old, returns, torch.ones(1, 3), clip_range_value=0.2)
    #  V 1.5 -> R 2.0: (1.5-2)^2 = 0.25 < (1.2-2)^2 = 0.64: the clipped error wins, no gradient
    #  V 1.5 -> R 1.0: (1.5-1)^2 = 0.25 > (1.2-1)^2 = 0.04: unclipped, grad 0.5 * 2 * 0.5 = 0.5
    #  V 1.1 inside:   (1.1-3)^2 = 3.61 both ways, grad 0.5 * 2 * (1.1 - 3) = -1.9
    assert close(loss, 0.5 * (0.64 + 0.25 + 3.61) / 3)  # 0.75
    assert close(clip_fraction, 1 / 3)
    loss.backward()
    assert close(values.grad, [[0.0, 0.5 / 3, -1.9 / 3]])


# --- KL estimators and shaped rewards ------------------------------------------------------------
P = torch.tensor([0.5, 0.25, 0.25])  # the policy
Q = torch.tensor([0.25, 0.5, 0.25])  # the reference


def test_k1_and_k3_per_token_by_hand():
    logp, ref = P.log(), Q.log()
    ln2 = math.log(2)
    assert close(kl_k1(logp, ref), [ln2, -ln2, 0.0])
    # k3 = (r - 1) - log r, r = q/p: r = 0.5 -> -0.5 + ln 2; r = 2 -> 1 - ln 2; r = 1 -> 0
    assert close(kl_k3(logp, ref), [-0.5 + ln2, 1 - ln2, 0.0])
    exact = 0.5 * ln2 + 0.25 * math.log(0.5)  # KL(P || Q) = 0.25 ln 2
    assert close((P * kl_k1(logp, ref)).sum(), exact)  # both unbiased: E_P[k] = KL exactly
    assert close((P * kl_k3(logp, ref)).sum(), exact)
    assert close(per_token_kl(logp, ref, "k3"), kl_k3(logp, ref))
    with pytest.raises(ValueError, match="unknown kl estimator 'k2'"):
        per_token_kl(logp, ref, "k2")


def test_k3_is_nonnegative_and_unbiased_on_a_sampled_categorical():
    g = torch.Generator().manual_seed(0)
    # a reference near the policy, as in RLHF: k3's lower variance holds when KL is small
    # (Schulman 2020); for far-apart distributions its r - 1 term can blow up instead
    z = torch.randn(8, generator=g)
    p, q = torch.softmax(z, 0), torch.softmax(z + 0.3 * torch.randn(8, generator=g), 0)
    exact = float((p * (p.log() - q.log())).sum())
    x = torch.multinomial(p, 200_000, replacement=True, generator=g)
    k1, k3 = kl_k1(p.log()[x], q.log()[x]), kl_k3(p.log()[x], q.log()[x])
    assert (k3 >= 0).all() and (k1 < 0).any()  # k1 goes negative per token, k3 never
    assert abs(float(k3.mean()) - exact) < 3 * float(k3.std()) / math.sqrt(len(x))
    assert abs(float(k1.mean()) - exact) < 3 * float(k1.std()) / math.sqrt(len(x))
    assert float(k3.std()) < float(k1.std())  # why one would pick k3


def test_kl_shaped_rewards_put_the_score_on_the_last_unpadded_token():
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.5, -0.5, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    rewards = kl_shaped_rewards(torch.tensor([1.0, 2.0]), kl, mask, kl_coef=0.1)
    # -0.1 * kl everywhere unmasked, + score at the last unmasked column (2 and 1)
    assert close(rewards, [[-0.01, -0.02, -0.03 + 1.0], [-0.05, 0.05 + 2.0, 0.0]])
    assert last_token_index(torch.tensor([[0.0, 1.0, 1.0, 0.0]])).tolist() == [2]
    with pytest.raises(ValueError, match="at least one unmasked"):
        last_token_index(torch.zeros(1, 3))


def test_masked_mean_and_whiten():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0, 100.0])
    m = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0])
    assert close(masked_mean(x, m), 2.5)
    # unbiased variance (2.25 + 0.25 + 0.25 + 2.25) / 3 = 5/3
    assert close(masked_whiten(x, m), [(v - 2.5) / math.sqrt(5 / 3) for v in (1, 2, 3, 4)] + [0.0], tol=1e-5)
    assert close(masked_whiten(x, m, shift_mean=False)[:4], [(v - 2.5) / math.sqrt(5 / 3) + 2.5 for v in (1, 2, 3, 4)], tol=1e-5)
    assert close(masked_mean(torch.ones(2, 2), torch.tensor([[1.0, 1.0], [0.0, 0.0]]), dim=1), [1.0, 0.0])


def test_entropy_by_hand():
    # uniform over 4: ln 4; one-hot (a very peaked softmax): ~0
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [50.0, 0.0, 0.0, 0.0]]])
    assert close(entropy_from_logits(logits), [[math.log(4), 0.0]], tol=1e-5)
    # P = [0.5, 0.25, 0.25]: H = 0.5 ln 2 + 2 * 0.25 ln 4 = 1.5 ln 2
    assert close(entropy_from_logits(P.log()[None, None]), [[1.5 * math.log(2)]])


# --- KL controllers ------------------------------------------------------------------------------
def test_adaptive_kl_controller_moves_beta_toward_the_target():
    ctl = AdaptiveKLController(0.1, target=1.0, horizon=100)
    ctl.update(2.0, n_steps=10)  # error clip(2/1 - 1) = 0.2: beta * (1 + 0.2 * 10 / 100)
    assert close(ctl.value, 0.1 * 1.02)
    ctl.update(0.5, n_steps=10)  # error clip(-0.5) = -0.2: beta * 0.98
    assert close(ctl.value, 0.1 * 1.02 * 0.98)
    before = ctl.value
    ctl.update(1.1, n_steps=10)  # error 0.1, inside the clip: beta * 1.01
    assert close(ctl.value, before * 1.01)
    ctl.update(float("nan"), n_steps=10)
    assert close(ctl.value, before * 1.01)
    fixed = FixedKLController(0.05)
    fixed.update(100.0, 10)
    assert fixed.value == 0.05
    with pytest.raises(ValueError, match="target"):
        AdaptiveKLController(0.1, target=0.0, horizon=100)


# --- agreement with TRL 1.16 and transformers on the same inputs ---------------------------------
def test_entropy_and_logprobs_agree_with_trl():
    from trl.trainer.utils import entropy_from_logits as trl_entropy
    from trl.trainer.utils import selective_log_softmax

    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 5, 11, generator=g) * 3
    tokens = torch.randint(0, 11, (3, 5), generator=g)
    assert torch.allclose(entropy_from_logits(logits), trl_entropy(logits), atol=1e-5)
    assert torch.allclose(logprobs_from_logits(logits, tokens), selective_log_softmax(logits, tokens), atol=1e-5)


def test_last_token_index_agrees_with_trl_reward_indexing():
    from trl.experimental.utils import first_true_indices

    # TRL's get_reward scores right-padded rows at first_true_indices(is_pad) - 1
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    assert last_token_index(mask).tolist() == (first_true_indices(mask == 0) - 1).tolist() == [2, 4, 0]


def test_ptx_loss_agrees_with_the_transformers_causal_lm_loss():
    from transformers.loss.loss_utils import ForCausalLMLoss

    g = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 6, 13, generator=g)
    labels = torch.tensor([[-100, -100, 3, 4, 5, -100], [-100, 7, 8, 9, 10, 11]])
    ours = ptx_loss(logits, labels)
    assert torch.allclose(ours, ForCausalLMLoss(logits, labels, vocab_size=13), atol=1e-6)
    # by hand: the mean of -log softmax(logits[b, t])[labels[b, t + 1]] over the 3 + 5 labelled targets
    lp = torch.log_softmax(logits, -1)
    terms = [-lp[b, t, labels[b, t + 1]] for b in range(2) for t in range(5) if labels[b, t + 1] != -100]
    assert len(terms) == 8 and torch.allclose(ours, torch.stack(terms).mean(), atol=1e-6)
