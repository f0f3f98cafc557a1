"""The queue of prompts for the token budget and the decode stalls (gpucap.queueing.promptqueue),
against textbook queues and equations solved by hand."""

import math

import numpy as np
import pytest

from gpucap.queueing.promptqueue import (
    GROUP_STATES,
    group_costs,
    lundberg_root,
    normal_quantile,
    per_prompt_costs,
    prompt_wait,
    stalled_tpot,
    step_groups,
)


def exponential_holds(mean_s: float, points: int = 4000) -> tuple[np.ndarray, np.ndarray]:
    """An exponential holding time of ``mean_s`` as ``points`` equally likely quantile midpoints."""
    u = (np.arange(points) + 0.5) / points
    return (-mean_s * np.log1p(-u))[None, :], np.full(points, 1.0 / points)


def test_mm1_wait_is_the_textbook_one() -> None:
    """M/M/1: P(W > t) = rho exp(-(mu - lambda) t) exactly (Kleinrock, Queueing Systems vol. 1,
    1975, section 3.2): Lundberg's root is mu - lambda and the constant C is rho, so the wait is 0
    with probability 1 - rho and Exp(mu - lambda) otherwise."""
    mu, lam = 4.0, 3.0
    hold, w = exponential_holds(1.0 / mu)
    wait = prompt_wait(np.array([lam]), 1.0, hold, w)
    # the discretized exponential's tail is cut at its largest point: a small error in theta
    assert wait.rate[0] == pytest.approx(mu - lam, rel=0.02)
    assert wait.rho[0] == pytest.approx(lam / mu, rel=1e-3)
    assert wait.p[0] == pytest.approx(lam / mu, rel=0.02)
    assert wait.shift_s[0] == pytest.approx(0.0, abs=0.01)
    assert wait.mean_s()[0] == pytest.approx((lam / mu) / (mu - lam), rel=0.03)  # M/M/1's rho / (mu - lambda)


def test_md1_root_solves_lundbergs_equation() -> None:
    """M/D/1 with q = 0.25 s and lambda = 2/s (rho = 0.5): theta solves lambda (e^{theta q} - 1) = theta.
    By hand: theta = 5 gives 2 (e^1.25 - 1) = 4.98 < 5 and theta = 5.1 gives 2 (e^1.275 - 1) = 5.16 > 5.1,
    so the root lies in (5.0, 5.1)."""
    theta = lundberg_root(np.array([2.0]), 1.0, np.array([[0.25]]), np.array([1.0]))[0]
    assert 5.0 < theta < 5.1
    assert 2.0 * math.expm1(0.25 * theta) == pytest.approx(theta, rel=1e-6)


def test_md1_mean_wait_near_pollaczek_khinchine() -> None:
    """The Cramer-Lundberg form's mean wait against M/D/1's exact rho q / (2 (1 - rho))
    (Pollaczek-Khinchine): within 10% from rho = 0.3 to 0.9 (an asymptotic form, exact in the tail)."""
    q = 0.25
    for rho in (0.3, 0.5, 0.7, 0.9):
        wait = prompt_wait(np.array([rho / q]), 1.0, np.array([[q]]), np.array([1.0]))
        assert wait.mean_s()[0] == pytest.approx(rho * q / (2 * (1 - rho)), rel=0.10)


def test_gamma_arrivals_root() -> None:
    """Gamma gaps of shape k: E[exp(theta q)] = (1 + theta / (k lambda))^k at the root; burstier
    arrivals (smaller k) decay more slowly."""
    lam, q = 2.0, np.array([[0.25]])
    smooth = lundberg_root(np.array([lam]), 1.0, q, np.array([1.0]))[0]
    bursty = lundberg_root(np.array([lam]), 0.5, q, np.array([1.0]))[0]
    assert math.exp(bursty * 0.25) == pytest.approx((1 + bursty / (0.5 * lam)) ** 0.5, rel=1e-6)
    assert bursty < smooth


def test_overloaded_budget_has_no_root() -> None:
    """lambda E[q] >= 1: the budget never drains."""
    wait = prompt_wait(np.array([5.0]), 1.0, np.array([[0.25]]), np.array([1.0]))
    assert not wait.stable[0]
    assert np.isinf(wait.mean_s()[0])


def test_stalled_tpot_by_hand() -> None:
    """t_dec = 20 ms, O = 100 (99 decode steps), prompts at 2/s each stalling 0.25 s (rho_s = 0.5).
    Mean: T = 99 x 0.02 / (1 - 0.5) = 3.96 s, TPOT = 40 ms. P99 (z = 2.326): one stall length, so the
    sum over a life T has k2 = lambda s^2 T and skew 1 / sqrt(lambda T); T solves
    T = 1.98 + 0.5 T + (z + (z^2 - 1) / (6 sqrt(2 T))) sqrt(0.125 T). Without the skew term the
    quadratic 0.5 x^2 - 0.82237 x - 1.98 = 0 (x = sqrt T) gives T = 8.854 s; the skew lengthens it."""
    kw = dict(output_len=100.0, rate=np.array([2.0]), burstiness=1.0, stall_s=np.array([[0.25]]), weights=np.ones(1))
    assert stalled_tpot(np.array([0.02]), z=0.0, **kw)[0] == pytest.approx(0.040, rel=1e-9)
    z = normal_quantile(0.99)
    assert z == pytest.approx(2.326, abs=1e-3)
    life = stalled_tpot(np.array([0.02]), z=z, **kw)[0] * 99
    skew = 1 / math.sqrt(2 * life)
    assert life == pytest.approx(1.98 + 0.5 * life + (z + (z * z - 1) * skew / 6) * math.sqrt(0.125 * life), rel=1e-6)
    assert life > 8.854
    # a column per state: each row's own rho and sigma
    two = stalled_tpot(np.array([[0.02, 0.04]]), z=0.0, **kw)
    assert two == pytest.approx(np.array([[0.040, 0.080]]))


def test_entries_cap_the_prompts_a_life_meets() -> None:
    """One stall length s = 0.25 s (no spread), t_dec = 20 ms, O = 100 (base 1.98 s), prompts at
    3.6/s (rho_s = 0.9). A life that starts with F = 2 slots free in a replica completing mu = 2
    requests/s meets at most y = 2 + 2 T prompts, so T = 1.98 + 0.25 (2 + 2 T): T = 2.48 / 0.5 =
    4.96 s, TPOT 50.1 ms, at every level (the count is at its cap, and one length has no
    spread). Poisson's count at P99 would give far more: with 1 - rho_s = 0.1 and sigma = sqrt(3.6
    x 0.25^2) = 0.474, 0.1 x^2 - 2.326 x 0.474 x - 1.98 = 0 gives T = 159 s before the skew term
    lengthens it; the mean is not capped (19.8 / 99 = 200 ms); where prompts entering at the completion rate fill the
    time (mu s = 1 at mu = 4), there is no cap."""
    kw = dict(output_len=100.0, rate=np.array([3.6]), burstiness=1.0, stall_s=np.array([[0.25]]), weights=np.ones(1))
    z = normal_quantile(0.99)
    free = stalled_tpot(np.array([0.02]), z=z, **kw)[0] * 99
    assert free > 159.0
    capped = stalled_tpot(np.array([0.02]), z=z, entries=(np.array([2.0]), 2.0), **kw)[0]
    assert capped == pytest.approx(4.96 / 99, rel=1e-9)
    low = stalled_tpot(np.array([0.02]), z=normal_quantile(0.01), entries=(np.array([2.0]), 2.0), **kw)[0]
    assert low <= capped
    assert stalled_tpot(np.array([0.02]), z=0.0, entries=(np.array([2.0]), 2.0), **kw)[0] == pytest.approx(0.2)
    full = stalled_tpot(np.array([0.02]), z=z, entries=(np.array([2.0]), 4.0), **kw)[0]
    assert full == pytest.approx(free / 99, rel=1e-12)


def test_entry_cap_with_two_stall_lengths_by_hand() -> None:
    """Stalls of 0.1 s and 0.3 s, half each: E[s] = 0.2, Var s = 0.01, third central moment 0. No
    slot free at the start (F = 0), mu = 2/s, t_dec = 10 ms, O = 51 (base 0.5 s). At z = 2: the
    count y = 2 T, S = 0.2 y + 2 sqrt(0.01 y), so with x = sqrt(y): (1/2 - 0.2) x^2 - 0.2 x - 0.5 =
    0 (the skew term is 0), x = (0.2 + sqrt(0.04 + 0.6)) / 0.6 = 1.6667, T = x^2 / 2 = 1.3889 s;
    the prompts at 1.9/s otherwise (rho_s 0.38) give a longer life at that score."""
    kw = dict(output_len=51.0, rate=np.array([1.9]), burstiness=1.0, stall_s=np.array([[0.1, 0.3]]))
    tpot = stalled_tpot(np.array([0.01]), z=2.0, weights=np.array([0.5, 0.5]), entries=(np.array([0.0]), 2.0), **kw)
    x = (0.2 + math.sqrt(0.04 + 0.6)) / 0.6
    assert tpot[0] == pytest.approx(x * x / 2 / 50, rel=1e-9)
    free = stalled_tpot(np.array([0.01]), z=2.0, weights=np.array([0.5, 0.5]), **kw)
    assert free[0] > tpot[0]


def test_stalled_tpot_output_length_per_column() -> None:
    """One output length per column, as one call per length."""
    kw = dict(rate=np.array([2.0]), burstiness=1.0, stall_s=np.array([[0.25]]), weights=np.ones(1))
    z = normal_quantile(0.9)
    both = stalled_tpot(np.array([[0.02, 0.02]]), z=np.array([z, z]), output_len=np.array([20.0, 400.0]), **kw)
    for k, o in enumerate((20.0, 400.0)):
        assert both[0, k] == pytest.approx(stalled_tpot(np.array([0.02]), z=z, output_len=o, **kw)[0], rel=1e-12)
    assert both[0, 0] > both[0, 1]  # a short life spreads more


def test_stalled_tpot_without_prompts_is_the_decode_step() -> None:
    none = stalled_tpot(
        np.array([0.02]), output_len=50.0, rate=np.array([0.0]), burstiness=1.0, stall_s=np.array([[0.3]]),
        weights=np.ones(1), z=2.326,
    )  # fmt: skip
    assert none[0] == pytest.approx(0.02)


# ---- prompts per step: the chain n' ~ Poisson(lambda (t_dec + n s_n)) -----------------------------
def test_step_groups_mean_count_solves_the_linear_balance() -> None:
    """With one cost s per prompt, E[n'] = lambda (t_dec + s E[n]) in steady state, so
    E[n] = lambda t_dec / (1 - lambda s): 4/s x 50 ms / (1 - 4 x 0.1) = 1/3 prompt a step."""
    pi = step_groups(np.array([4.0]), np.array([0.05]), np.full((1, GROUP_STATES), 0.1))
    assert pi.sum() == pytest.approx(1.0)
    assert pi[0] @ np.arange(GROUP_STATES) == pytest.approx(0.2 / 0.6, rel=1e-6)


def test_group_costs_between_alone_and_shared() -> None:
    """A pipeline of two stages: a lone prompt costs 2 sigma (its micro-batch runs while the other
    stage waits), two or more cost sigma each. At a trickle every prompt rides alone (2 sigma);
    the more arrive, the more share: the cost falls toward sigma, and each prompt pays
    sigma (1 + pi_1 / E[n]), the share of prompts that ride alone being pi_1 / E[n]."""
    sigma, dec = 0.1, 0.04
    sizes = np.array([[2 * sigma, sigma, sigma, sigma]])  # at 1, 2, 4, 8 prompts a step
    lam = np.array([1e-4, 2.0, 5.0, 8.0])
    per_prompt = per_prompt_costs(np.repeat(sizes, 4, axis=0))  # (rows, N)
    assert per_prompt[0, 1] == 2 * sigma and np.all(per_prompt[0, 2:] == sigma)
    cost = group_costs(lam, np.full(4, dec), per_prompt)
    assert cost[0] == pytest.approx(2 * sigma, rel=1e-3)
    assert np.all(np.diff(cost) < 0) and np.all(cost > sigma)
    pi = step_groups(lam, np.full(4, dec), per_prompt)
    n = np.arange(GROUP_STATES)
    assert cost[1:] == pytest.approx(sigma * (1 + pi[1:, 1] / (pi[1:] @ n)), rel=1e-9)
