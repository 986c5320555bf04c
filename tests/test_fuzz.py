"""Random programs (hypothesis, derandomised: the same programs on every run).

Default suite, 200 programs (slow: 100 more): the NNGP kernel is finite, exactly symmetric and PSD within its
error bounds; the cross kernel ``nngp(p, X[:k], X[k:])`` equals the block of ``nngp(p, X)``
within the sum of their bounds; nothing but a NetsorError is ever raised (a program out of
reach of the default tolerance raises NumericalError saying what was reached; its properties
are then checked at a looser tolerance).

Default suite, 60 programs (no opaque functions): the NTK is finite, exactly symmetric, and
``Θ − K`` (a sum of Gram matrices of parameter gradients) is PSD within the two kernels' bounds.

Default suite, 120 programs: the joint QMC simulation of the limit (one round, 16 × 2^12 copies)
agrees with the expectation engine within the sum of their bounds (this test found that Student-t
bounds undercover: netsor.interpret.simulation.ERROR_SES); 60 more with a BatchNorm step at one input;
150 Netsor⊤ programs (chains of uses of a rectangular and a square matrix both ways, with and without
data), where the simulation's Stein-lemma Ż meets the engine's (this found a bare KeyError in the
engine's walk); 30 more with corrections in the coupled run, whose finite side is the matrix-free
sampler and whose coupling distances fall like n^{-1/2}.

Default suite, 60 + 40 programs with a product of normal-CDF gates of two vectors (cone moments of up to
6 dependent gate forms): engine against simulation, and the kernel properties above.

Default suite, 60 activations written with numpy (slow: 300 larger ones; a third at nearly parallel inputs):
traced, and opaque with the traced derivative given, their NNGP and NTK agree within the sum of the bounds.

Default suite, 4 kinked + smooth activations (a piecewise-linear tree plus a smooth function; slow: 30 more, deeper and
closer) at two inputs 1e-3 … 1e-5 apart: NNGP and NTK bounds cover their errors against nested quadrature.

Slow, 30 programs: the mean conditional kernel of finite networks at widths 1024 and 2048,
extrapolated in 1/n, agrees with the limit within 4.5 standard errors; 30 + 30 more (plain and Netsor⊤): the mean
empirical NTK (reverse mode through the finite interpreter) at widths 512 and 1024 agrees with the limit's NTK.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import references
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from scipy import special
from strategies import (
    ACTIVATIONS,
    Recipe,
    activation_trees,
    build,
    build_transposed,
    evaluate,
    inputs,
    recipes,
    transpose_recipes,
)

import netsor
from netsor.errors import NumericalError
from netsor.interpret.simulation import SimulatedLimit

FAST = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def kernel(p, X, X2=None):
    """(K, E, rtol) by the expectation engine: at the default tolerance, or at 1e-3 when the default
    is out of reach (the QMC simulation is compared with it in its own test)."""
    for rtol in (netsor.interpret.infinite.DEFAULT_RTOL, 1e-3):
        try:
            K, E = netsor.limit(p, X, X2, rtol=rtol, method="expectations").nngp(with_error=True)
            return K, E, rtol
        except NumericalError as exc:
            message = str(exc)
            # out of reach at this tolerance, an overflow, a BatchNorm over a batch without spread, a
            # scalar that is infinite in the limit (LayerNorm of a vector of variance 0), a jump on a tie
            # of the limit only (no Gaussian limit: netsor.interpret.ties), or a kernel that is 0 (every output
            # cancels exactly: no relative bound to compare): refusals that say why
            no_limit = ("not finite in the limit", "only in the limit", "is 0 in the limit")
            assert any(w in message for w in ("rtol", "non-finite", "NaN", "no spread") + no_limit), message
            if any(w in message for w in no_limit):
                return None
    return None


def assert_engine_agrees_with_simulation(p, X, seed, result=...):
    """The expectation engine's kernel (skipped where out of its reach; ``result``: :func:`kernel`'s,
    computed already, None where out of reach) and the QMC simulation's (one round of 16 × 2^12
    copies) agree within the sum of their bounds; returns the simulation."""
    result = kernel(p, X) if result is ... else result
    assume(result is not None)
    K, E, _ = result
    lim = SimulatedLimit(p, X, rtol=1.0, seed=seed)
    try:
        K_sim, E_sim = lim.nngp(psd="skip", with_error=True)
    except NumericalError as exc:
        # an output that is exactly 0 in the limit (|g − g| with g = a·g, a = 1 a softmax weight): the engine
        # says 0, the simulation's copies carry rounding residues of no scale, and it refuses saying why
        assert np.any(np.diag(K) == 0.0) and "relative error" in str(exc), str(exc)
        return lim
    scale = np.sqrt(np.outer(np.abs(np.diag(K)), np.abs(np.diag(K))))
    assert np.all(np.abs(K_sim - K) <= E + E_sim + 1e-12 * scale)
    return lim


KERNEL_PROGRAMS = dict(recipe=recipes(max_steps=5, opaque=True), B=st.integers(2, 4), d=st.integers(3, 6),
                       seed=st.integers(0, 2**16), duplicate=st.booleans())


#: A jump on a tie that is exact in arithmetic: ``where(a·g > g, …)`` with ``a`` the softmax weight of one token
#: (1), then an opaque max; the whitened rows of ``a·g`` and ``g`` differed in the last bits, and the cross kernel
#: depended on how the inputs were split, 33 % off within its bound (seed 23232)
ROUNDED_TIE = Recipe(sigmas=((0.8, 0.0),), steps=(("attention", 0, 0, 0.5), ("traced", 189, 0, "where"),
                                                  ("matmul", 0, 0, 0.5), ("act", 0, "relu"), ("act", 0, "relu"),
                                                  ("opaque", 512, 0)),
                     readouts=(((0, 174), 1.0, 0.0, False),))

#: erf(relu(g)·tanh(h))·relu(g) against relu(g): the series' tails met 1e-8 at degree 16, but the coefficients of
#: that order's table did not (2e-8 of ‖F‖ each): the cross kernel of one input against the others was refused
#: at 1e-8 where the symmetric kernel was not (campaign seed 134); the tables' order now grows until both meet it
COARSE_TABLE = Recipe(
    sigmas=((1.2, 0.0), (1.2, 0.3)),
    steps=(("matmul", 0, 1, 0.5), ("traced", 314, 226, "relu*tanh"), ("traced", 335, 542, "gate*relu"),
           ("matmul", 201, 1, 1.0), ("traced", 314, 226, "relu*tanh")),
    readouts=(((864, 74), 0.7, 0.2, True),))

#: Attention, a max and a where of its output, an opaque function: a cone function of three arguments with
#: parallel steps at some points, whose per-point moments split between the rules (a column count wrong for
#: k ≠ 2 crashed there: opaque campaign seed 445)
PARALLEL_STEPS_OF_THREE = Recipe(
    sigmas=((0.8, 0.3), (0.8, 0.3)),
    steps=(("attention", 595, 450, 1.0), ("traced", 757, 3, "max"), ("traced", 624, 595, "where"),
           ("matmul", 427, 3, 0.9), ("opaque", 230, 211)),
    readouts=(((5,), 1.0, 0.0, True), ((0,), 1.0, 0.0, True)))


#: clip(g + (s·g)²) with s = exp(0)/exp(0) = 1: per point a function of one form (the two arguments tied), by
#: the nested rule, whose refinement stopped when a doubling left the rule unchanged (its panel widths are capped):
#: E h² at one input alone was stuck at 3.3e-4 (2.1e-5 among the other inputs), and the cross kernel was refused
#: at rtol 1e-3 where the symmetric one met it (strict campaign seed 704)
TIED_CLIP_OF_A_PARABOLA = Recipe(
    sigmas=((1.0, 0.0), (1.2, 0.3)),
    steps=(("attention", 407, 255, 1.0), ("bias", 0.5), ("mul", 734, 118), ("traced", 43, 712, "clip"),
           ("traced", 43, 712, "clip")),
    readouts=(((6,), 1.0, 0.0, False),))


@FAST
@given(**KERNEL_PROGRAMS)
@example(recipe=TIED_CLIP_OF_A_PARABOLA, B=3, d=4, seed=1029, duplicate=False)
@example(recipe=ROUNDED_TIE, B=2, d=3, seed=3, duplicate=False)
@example(recipe=COARSE_TABLE, B=4, d=6, seed=4343, duplicate=False)
@example(recipe=PARALLEL_STEPS_OF_THREE, B=2, d=3, seed=273, duplicate=False)
def test_random_programs_have_finite_symmetric_psd_consistent_kernels(recipe, B, d, seed, duplicate):
    check_kernel_properties(recipe, B, d, seed, duplicate)


def test_a_tied_clip_of_a_parabola_at_one_input_meets_rtol_against_adaptive_quadrature():
    """The per-point moment behind ``TIED_CLIP_OF_A_PARABOLA``: ``E clip(u + u²)²`` (the two arguments are one
    form) at one input alone, at rtol 1e-3 — refused before (stuck at 3.3e-4 absolute) — against scipy's adaptive
    quadrature split at the kinks u + u² = 1; the reported bound covers the true error."""
    from scipy import integrate, stats

    X = inputs(3, 4, 1029, False)[2:]
    p = build(TIED_CLIP_OF_A_PARABOLA)
    value, error = netsor.limit(p, X, rtol=1e-3, method="expectations").var(p.outputs[0][1][0], with_error=True)
    sd = np.sqrt(1.2**2 * X[0] @ X[0] / X.shape[1] + 0.3**2)  # g = U x + b: σ_U = 1.2, σ_b = 0.3
    reference = integrate.quad(lambda u: np.clip(u + u * u, -1.0, 1.0) ** 2 * stats.norm.pdf(u, scale=sd),
                               -12 * sd, 12 * sd, points=[(-1 - 5**0.5) / 2, (-1 + 5**0.5) / 2],
                               epsabs=1e-14, epsrel=1e-13, limit=200)[0]  # found 9.9e-6 off, bound 1.7e-4
    assert error[0] <= 1e-3 * value[0]
    assert abs(value[0] - reference) <= error[0]


#: Programs whose joint terms have exact rules but whose propagated error bounds were capped at twice the kernel
#: (refused at every rtol): E[g step(g')] bounded by the identity's kernel (refusal scan, seed 1), and a jump
#: of a vector against a bias vector — one variable at both inputs, 1 − ‖R‖ = 0 in the χ² bound (seed 1)
IDENTITY_AGAINST_STEP = Recipe(sigmas=((1.2, 0.3), (1.2, 0.3)),
                               steps=(("traced", 116, 323, "max"), ("act", 600, "step")),
                               readouts=(((255, 0), 0.7, 0.0, False),))
JUMP_AGAINST_A_BIAS = Recipe(sigmas=((0.8, 0.3),), steps=(("traced", 79, 282, "where"), ("bias", 0.2),
                                                          ("traced", 566, 164, "where"), ("mul", 772, 997),
                                                          ("traced", 497, 0, "where")),
                             readouts=(((830, 245), 1.0, 0.0, True), ((160, 483), 1.0, 0.0, False)))
#: clip(2g) = relu(2g + 1) − relu(2g − 1) − 1: terms 4× the result, 13 % over rtol at every rtol (found by this test)
CANCELLING_CLIP = Recipe(sigmas=((0.8, 0.0),), steps=(("traced", 0, 0, "clip"),), readouts=(((1,), 1.0, 0.0, False),))
#: where(g > relu(h), …): a jump on the half-lines g = h > 0 and g = 0 > h, seen as hidden kinks (QMC, 1e-3 out of
#: reach); now a sum of cones (found by this test)
STEP_ABOVE_A_RELU = Recipe(sigmas=((0.8, 0.0), (0.8, 0.0)),
                           steps=(("matmul", 0, 0, 0.5), ("act", 1, "relu"), ("matmul", 0, 0, 0.5),
                                  ("traced", 0, 23, "where"), ("matmul", 0, 0, 0.5)),
                           readouts=(((600,), 1.0, 0.0, False),))
#: clip(g + relu(h)): kinks of the argument's linear pieces with offsets, seen as hidden (QMC, 1.04e-3 at rtol
#: 1e-3; strict campaign seed 22); now planes of the nested quadrature
CLIP_OF_A_RELU = Recipe(sigmas=((0.8, 0.0), (0.8, 0.0)), steps=(("act", 0, "relu"), ("traced", 1, 296, "clip")),
                        readouts=(((3,), 1.0, 0.0, False),))
#: step(g) and LN(g) read out together: colinear forms at one input, the χ² bound divided by 1 − ρ = 0 (seed 41)
STEP_AND_LAYERNORM = Recipe(sigmas=((0.8, 0.0), (0.8, 0.0)),
                            steps=(("matmul", 0, 0, 0.5), ("attention", 0, 1, 0.5), ("act", 0, "relu"),
                                   ("act", 676, "step"), ("layernorm", 384)),
                            readouts=(((6, 7), 1.0, 0.0, False),))
#: clip(g + h·h): kinks on the parabolas g + h² = ±1, hidden from every exact rule (QMC; strict campaign seed 51)
CURVED_KINK = Recipe(sigmas=((0.8, 0.0), (0.8, 0.0)),
                     steps=(("act", 0, "relu"), ("mul", 0, 0), ("traced", 1, 3, "clip"), ("bias", 0.2)),
                     readouts=(((130,), 1.0, 0.0, False),))
#: |g − |g − h|/2|: the cone expansion of |·| and relu of piecewise-linear arguments gave bounds 10³× the
#: kernel (strict campaign seed 53): its pieces are linearly dependent, and the cone moments amplified rounding
#: by the worst form of the family, used or not; now per form (bound 1.3e-13)
ABS_OF_AN_ABS = Recipe(sigmas=((0.8, 0.0), (0.8, 0.0)),
                       steps=(("act", 0, "relu"), ("matmul", 0, 0, 0.5), ("traced", 0, 1, "abs-diff"),
                              ("traced", 0, 464, "abs-diff"), ("matmul", 0, 0, 0.5)),
                       readouts=(((628,), 1.0, 0.0, False),))
#: 0.5·step(tanh g) + step(g − step(tanh g))·(g − 0.5·step(tanh g)): step(tanh g) is step(g), but as a composite its
#: jump was a hidden kink and the argument of the outer step not piecewise linear (bound 0.73 of the kernel at every
#: rtol; strict campaign seed 65); the step of a sign-preserving function is now the step of its argument
STEP_OF_A_TANH = Recipe(sigmas=((0.8, 0.0),), steps=(("act", 0, "tanh"), ("act", 1, "step"), ("act", 0, "relu"),
                                                     ("act", 0, "relu"), ("traced", 0, 452, "where")),
                        readouts=(((101,), 1.0, 0.0, False),))
#: gate(g)·relu(b)·g·|g − b|/2: the forms b, g − b and g of one term are linearly dependent; the third's conditional
#: variance was the rounding of a difference and the cone moments amplified it by 1/eps (bound 281 of the kernel at
#: every rtol; strict campaign seed 75); now exactly 0 (bound 1.8e-11 at rtol 1e-8)
DEPENDENT_FORMS = Recipe(sigmas=((0.8, 0.0), (0.8, 0.3)),
                         steps=(("traced", 0, 1, "abs-diff"), ("mul", 0, 200), ("act", 0, "relu"),
                                ("traced", 0, 1, "gate*relu"), ("mul", 269, 249)),
                         readouts=(((34,), 1.0, 0.0, False),))
#: a vanishing output beside a vector: kernel entries at rounding (strict campaign seed 81)
VANISHING_OUTPUT = Recipe(sigmas=((0.8, 0.0),), steps=(("traced", 0, 0, "abs-diff"), ("traced", 0, 0, "clip")),
                          readouts=(((0, 1), 1.0, 0.0, False), ((0, 2), 1.0, 0.0, False)))
#: where(g > W b, g, W b / 2) with b a bias: W b is one variable at every input, and the χ² bound of its two
#: copies' null vector was infinite (its variance's rounding bound; strict campaign seed 92)
JUMP_AGAINST_A_MATRIX_OF_A_BIAS = Recipe(
    sigmas=((1.0, 0.0),), steps=(("bias", 0.5), ("layernorm", 1), ("traced", 1, 374, "max"), ("matmul", 457, 0, 0.9),
                                 ("traced", 220, 219, "where")),
    readouts=(((222, 319), 0.7, 0.2, True), ((256, 287), 0.7, 0.0, True)))
#: step(g − LN(g))·g: the step form and the factor g are one form rescaled per input (found by this test)
JUMP_AGAINST_LAYERNORM = Recipe(sigmas=((0.8, 0.0),), steps=(("layernorm", 0), ("bias", 0.2), ("traced", 0, 1, "where"),
                                                             ("act", 0, "relu"), ("matmul", 0, 0, 0.5)),
                                readouts=(((339,), 1.0, 0.0, False),))

#: where(b > LN(b), b, LN(b)/2) with b a bias: LN(b) = 2b, the pair's law two copies of one line whose rounding
#: bounds left it (χ² infinite; strict campaign seed 92): pairs of data-free vectors take the per-point value
LAYERNORM_OF_A_BIAS_AGAINST_IT = Recipe(
    sigmas=((1.0, 0.0), (0.8, 0.3)), steps=(("bias", 0.5), ("lincomb", 43, 156, 1.0), ("layernorm", 458),
                                            ("traced", 72, 129, "where")),
    readouts=(((89, 152), 0.7, 0.2, True),))

#: where(a > g + 0.3, …) times w, with a and w attention mixes of g and W g (rank 2 in three arguments): the kink
#: normal was (−0.87, 0.009) in the eigenvectors' whitening, and the nested rule 1.5e-3 off, bound 7e-3 (campaign
#: seed 135); it now turns the whitening to the kink
KINK_ALONG_AN_AXIS = Recipe(
    sigmas=((0.8, 0.3), (0.8, 0.3)),
    steps=(("matmul", 255, 3, 1.3), ("attention", 974, 259, 0.5), ("shift", 191, 0.3), ("layernorm", 338),
           ("traced", 927, 341, "where")),
    readouts=(((242,), 0.7, 0.0, True), ((252, 199), 1.0, 0.2, False)))

#: sin(g·g) at variance 5: it oscillates faster than the Hermite tables' uniform panels resolve, whose error
#: estimate (7.5e-3 of √E φ²) held the bound at 0.11 of the kernel at every rtol (strict campaign seed 203)
SIN_OF_A_SQUARE = Recipe(sigmas=((1.2, 0.0),), steps=(("mul", 222, 399), ("act", 355, "sin")),
                         readouts=(((203,), 1.0, 0.0, False),))

#: gate(g − 0.7b)·relu(s·b) with b a bias on both sides of the pair: two copies of b made a singular orthant
#: (bound 21.9× the kernel at every rtol; strict campaign seed 223); tied across the sides now
A_BIAS_ON_BOTH_SIDES = Recipe(
    sigmas=((1.2, 0.3),), steps=(("bias", 0.5), ("lincomb", 34, 403, -0.7), ("moment-scale", 745, 478),
                                 ("bias", 0.5), ("traced", 142, 993, "gate*relu")),
    readouts=(((107, 154), 1.0, 0.2, False),))

#: g' + relu(g − g' + 0.3) with g' = a·g, a = 1 the weight of a one-token attention: the form g − g' has variance
#: exactly 0 with a rounding bound, which the first-order rules divided by 0 (bound 0.69 of the kernel at every
#: rtol; strict campaign seed 230)
A_VANISHING_FORM_UNDER_A_KINK = Recipe(
    sigmas=((1.2, 0.0),), steps=(("shift", 962, 0.3), ("mul", 98, 839), ("attention", 167, 695, 1.0),
                                 ("traced", 413, 31, "max"), ("matmul", 432, 3, 0.5)),
    readouts=(((917, 364), 1.0, 0.2, True),))

#: clip(2g)², traced into cancelling monomials of relus of one form, whose bounds added (strict campaign seed 251)
CLIP_SQUARED = Recipe(sigmas=((1.2, 0.0),),
                      steps=(("traced", 344, 500, "clip"), ("mul", 999, 999), ("act", 292, "gelu")),
                      readouts=(((534, 157), 1.0, 0.2, False),))


#: |g − attention(g)| of one token (weight 1 up to rounding) read out beside g: the output vanishes in the
#: limit with a bound of 4e-14, refused at every rtol as 4e286 of its own scale (strict campaign seed 408)
VANISHING_ATTENTION_OUTPUT = Recipe(
    sigmas=((0.8, 0.0),),
    steps=(("attention", 176, 44, 1.0), ("attention", 635, 580, 0.5), ("traced", 0, 1, "abs-diff")),
    readouts=(((9,), 1.0, 0.0, False), ((0,), 1.0, 0.0, False)))

#: ``where(max(θg, g) > θg, …)`` with a moment θ < 1: the condition, ``step(g + relu(θg − g) − θg)``, is 0 for
#: every g < 0 in exact arithmetic and ±1 ulp as evaluated; its flicker put the kernel 44 % off, outside its
#: bound (strict campaign seed 419; Apply._argument).
WHERE_OF_A_MAXIMUM = Recipe(
    sigmas=((0.8, 0.3), (0.8, 0.3)),
    steps=(("moment-scale", 689, 533), ("moment-scale", 253, 319), ("traced", 659, 649, "max"),
           ("traced", 399, 548, "where"), ("layernorm", 663)),
    readouts=(((119, 966), 1.0, 0.0, False), ((362, 435), 0.7, 0.0, True)))

#: ``max(θg, relu(g))`` and ``max(g, θg)`` read out together: the first is ``relu(g) + relu(θg − relu(g))``, whose
#: second term is 0; its per-point E F² as cone moments of parallel steps was −7e-10, a NaN bound (strict
#: campaign seed 440; joint.point_moments).
MAXIMA_OF_A_SCALED_COPY = Recipe(
    sigmas=((0.8, 0.3),),
    steps=(("shift", 253, 0.3), ("moment-scale", 234, 45), ("act", 447, "relu"), ("traced", 762, 55, "max"),
           ("traced", 762, 55, "max")),
    readouts=(((172, 341), 0.7, 0.2, False),))

#: ``0.5·|g − attention(g)|`` over one token read out alone: every entry is 0 in the limit, with bounds at the
#: rounding of the weight 1; refused with advice to rescale or simulate (strict campaign seed 441), now with
#: the reason
ONLY_A_VANISHING_OUTPUT = Recipe(sigmas=((1.0, 0.0),),
                                 steps=(("attention", 346, 4, 0.5), ("traced", 129, 0, "abs-diff")),
                                 readouts=(((5,), 1.0, 0.0, True),))

#: gate·relu of two attention outputs, nearly colinear at each input (correlation 1 − 1e-8): the whitened
#: propagation of covariance rounding gave bounds of 1.1–5 × the kernel, refused at every rtol (strict campaign
#: seed 441; propagation._holder)
NEARLY_COLINEAR_ATTENTION_OUTPUTS = Recipe(
    sigmas=((1.0, 0.0), (0.8, 0.0)),
    steps=(("attention", 256, 55, 0.5), ("attention", 26, 476, 1.0), ("traced", 11, 328, "gate*relu")),
    readouts=(((198,), 0.7, 0.2, True), ((907, 132), 0.7, 0.2, True)))

#: a softmax average of a bias and a G-vector, times that G-vector: the whitened propagation of covariance
#: bounds reached 1.23e-3 at rtol 1e-3 (strict campaign seed 440); 1.9e-5 with the ½-Hölder bound beside it
ATTENTION_TIMES_ITS_SOURCE = Recipe(
    sigmas=((1.2, 0.0),),
    steps=(("bias", 0.5), ("matmul", 19, 2, 0.9), ("attention", 964, 324, 0.5), ("matmul", 19, 2, 0.9),
           ("mul", 4, 300)),
    readouts=(((300,), 1.0, 0.0, False), ((300,), 1.0, 0.0, False)))


@settings(FAST, max_examples=60)
@given(recipe=recipes(max_steps=5), B=st.integers(2, 4), d=st.integers(3, 6), seed=st.integers(0, 2**16))
@example(recipe=IDENTITY_AGAINST_STEP, B=2, d=3, seed=146)
@example(recipe=JUMP_AGAINST_A_BIAS, B=3, d=5, seed=2481)
@example(recipe=JUMP_AGAINST_LAYERNORM, B=2, d=3, seed=0)
@example(recipe=CANCELLING_CLIP, B=3, d=5, seed=0)
@example(recipe=STEP_ABOVE_A_RELU, B=2, d=3, seed=0)
@example(recipe=CLIP_OF_A_RELU, B=2, d=3, seed=1)
@example(recipe=STEP_AND_LAYERNORM, B=2, d=3, seed=0)
@example(recipe=CURVED_KINK, B=2, d=3, seed=0)
@example(recipe=ABS_OF_AN_ABS, B=2, d=3, seed=0)
@example(recipe=STEP_OF_A_TANH, B=2, d=4, seed=0)
@example(recipe=DEPENDENT_FORMS, B=2, d=3, seed=1)
@example(recipe=VANISHING_OUTPUT, B=2, d=3, seed=0)
@example(recipe=JUMP_AGAINST_A_MATRIX_OF_A_BIAS, B=3, d=4, seed=14763)
@example(recipe=LAYERNORM_OF_A_BIAS_AGAINST_IT, B=2, d=5, seed=65254)
@example(recipe=KINK_ALONG_AN_AXIS, B=3, d=4, seed=251)
@example(recipe=SIN_OF_A_SQUARE, B=2, d=3, seed=2)
@example(recipe=A_BIAS_ON_BOTH_SIDES, B=3, d=5, seed=271)
@example(recipe=A_VANISHING_FORM_UNDER_A_KINK, B=2, d=3, seed=46133)
@example(recipe=CLIP_SQUARED, B=3, d=5, seed=65536)
@example(recipe=VANISHING_ATTENTION_OUTPUT, B=2, d=3, seed=5)
@example(recipe=WHERE_OF_A_MAXIMUM, B=3, d=5, seed=282)
@example(recipe=MAXIMA_OF_A_SCALED_COPY, B=4, d=4, seed=32954)
@example(recipe=ONLY_A_VANISHING_OUTPUT, B=2, d=3, seed=4)
@example(recipe=NEARLY_COLINEAR_ATTENTION_OUTPUTS, B=4, d=4, seed=2924)
@example(recipe=ATTENTION_TIMES_ITS_SOURCE, B=4, d=4, seed=10754)
def test_random_programs_without_opaque_functions_reach_1e_3(recipe, B, d, seed):
    """Every step of these programs has an exact or quadrature rule, so the engine must reach 1e-3 (a
    refusal that says why is no excuse here: two bounds capped at twice the kernel hid behind it), unless
    the limit is not finite or does not exist (a jump on a tie of the limit only) or a kink lies on a curved
    set (QMC's reach). Over 350 programs of two scans, none fell short of 1e-8 once these were fixed."""
    check_reaches_1e_3(recipe, B, d, seed)


@settings(FAST, max_examples=60)
@given(recipe=recipes(max_steps=4, growth=True), B=st.integers(2, 4), d=st.integers(3, 6), seed=st.integers(0, 2**16))
def test_random_programs_with_growing_or_cusped_functions_have_consistent_kernels(recipe, B, d, seed):
    """One function growing exponentially (exp, cosh of G-vectors: second moments from far out,
    |z| ~ 2σ) or with a cusp (√|u + v|) in every program, the cases whose bounds once held below their
    errors: finite, symmetric, PSD within the bounds, cross blocks equal to the blocks of the joint kernel
    within their bounds. (Not all reach 1e-3: a cusp times another G-vector, ``g₂·√|g₁ + θg₂|``, is a
    4-dimensional joint term whose bound stops near 2e-3 — growth campaign seed 311.)"""
    check_kernel_properties(recipe, B, d, seed, duplicate=False)


SEPARABLE_PROGRAMS = dict(recipe=recipes(max_steps=4, separable=True), B=st.integers(2, 4), d=st.integers(3, 6),
                          seed=st.integers(0, 2**16), near=st.sampled_from([-0.05, 0.02, 0.1, 0.0]))


#: relu(g − ½)·relu(g') beside a moment-scaled vector, two inputs nearly colinear: a pair conditioned on its outer
#: arguments stopped at 1.4e-8 relative (the outer quadrature at its budget) where the nested rule over its rank-3 law
#: meets 1e-8; which of the two it took depended on the rounding of the tile's covariances, so the cross kernel was
#: refused where the symmetric one met 1e-8 (separable campaign seed 1321)
CONDITIONED_SHORT_OF_NESTED = Recipe(
    sigmas=((1.2, 0.0),), steps=(("moment-scale", 625, 188), ("separable", 273, 363, "relu-shift*relu")),
    readouts=(((505, 0), 1.0, 0.0, False), ((921,), 1.0, 0.0, False)))


@settings(FAST, max_examples=6)
@given(**SEPARABLE_PROGRAMS)
@example(recipe=CONDITIONED_SHORT_OF_NESTED, B=3, d=5, seed=1321, near=0.02)
def test_random_programs_with_separable_products_have_consistent_kernels(recipe, B, d, seed, near):
    """One function of two G-vectors separable given one of them in every program (hard_tanh·step with an
    offset, relu(· − ½)·relu, tanh·erf(· + 0.2), tanh(v + relu(u)), relu(v − 0.2 + step(u + 0.3)/2), relu(v +
    tanh(u)), kinked on a curve), read out, on inputs two of which are nearly colinear (their pairs are
    conditioned on one argument per side): finite, symmetric, PSD within the bounds, cross blocks equal to the
    blocks of the joint kernel."""
    check_kernel_properties(recipe, B, d, seed, duplicate=False, near=near)


@pytest.mark.slow
@settings(FAST, max_examples=40)
@given(**SEPARABLE_PROGRAMS)
def test_more_random_programs_with_separable_products_have_consistent_kernels(recipe, B, d, seed, near):
    """The same on 40 programs (the default suite keeps 6, for time: ~7 s each)."""
    check_kernel_properties(recipe, B, d, seed, duplicate=False, near=near)


#: LN(g)·|g − LN(g)| against g: the two arguments are proportional (ratio 1/s of the LayerNorm), and the
#: whitening rounded that ratio to 12 digits as if the program had written it: the cross block moved by
#: 2e-12 under a bound of 4e-14
LAYERNORM_TIMES_ITS_DISTANCE = Recipe(
    sigmas=((1.2, 0.3),), steps=(("layernorm", 414), ("factor", 0, 4, "abs", -1.0), ("layernorm", 414),
                                 ("layernorm", 414), ("layernorm", 4)), readouts=(((1, 72), 0.7, 0.0, True),))

#: b·|θ(x)·b − b| (θ a per-input scalar, b a bias): its arguments are multiples of one variable with a ratio
#: that varies over the inputs; against one point of X2 the tie of that side's forms held at every pair and
#: left the other side's forms singular in the tied orthants: the cross kernel's bound was 319× its value
#: (factors campaign seed 553) where the full kernel's was 1e-16
BIAS_TIMES_ITS_SCALED_DISTANCE = Recipe(
    sigmas=((1.0, 0.0),), steps=(("bias", 0.2), ("bias", 0.5), ("mul", 138, 410), ("moment-scale", 249, 43),
                                 ("factor", 983, 817, "abs", -1.0)), readouts=(((845, 890), 1.0, 0.0, True),))


@settings(FAST, max_examples=40)
@given(recipe=recipes(max_steps=4, factors=True), B=st.integers(2, 4), d=st.integers(3, 6), seed=st.integers(0, 2**16))
@example(recipe=LAYERNORM_TIMES_ITS_DISTANCE, B=2, d=3, seed=159)
@example(recipe=BIAS_TIMES_ITS_SCALED_DISTANCE, B=3, d=4, seed=1429)
def test_random_programs_with_a_factor_times_a_function_of_a_form_have_consistent_kernels(recipe, B, d, seed):
    """``v · f(u + αv)`` (tanh, erf, shifted relu, clip, abs, √|·|) in every program: the terms conditioned on
    their forms (netsor.gaussian.conditioned) give finite, symmetric, PSD kernels whose cross blocks equal the
    blocks of the joint kernel within their bounds."""
    check_kernel_properties(recipe, B, d, seed, duplicate=False)


@pytest.mark.slow
@settings(FAST, max_examples=15)
@given(recipe=recipes(max_steps=2, factors=True), seed=st.integers(0, 2**16))
def test_random_programs_with_a_factor_times_a_function_of_a_form_agree_with_the_simulated_limit(recipe, seed):
    """The same programs against the randomised-QMC simulation of the limit (an independent interpreter) at
    rtol 5e-3: within the two bounds, or a refusal that says so."""
    p = build(recipe)
    X = inputs(3, 4, seed)
    try:
        K, E = netsor.limit(p, X, rtol=1e-4, method="expectations").nngp(with_error=True)
        Kq, Eq = netsor.limit(p, X, rtol=5e-3, method="qmc", seed=seed).nngp(with_error=True)
    except NumericalError:
        return
    assert np.all(np.abs(K - Kq) <= E + Eq)


def check_reaches_1e_3(recipe, B, d, seed):
    p = build(recipe)
    X = inputs(B, d, seed)
    try:
        K, E = netsor.limit(p, X, rtol=1e-3, method="expectations").nngp(with_error=True)
    except NumericalError as exc:
        # kinks on curved sets (clip(g + h·h): g + h² = ±1, strict campaign seed 51) are hidden from every
        # exact rule: randomised QMC is the rule there, and its reach at 1e-3 is a refusal that says so
        curved = any(getattr(line, "expr", None) is not None and line.expr.hidden_kinks for line in p.lines)
        # ("is 0 in the limit": every output cancels exactly, 0.5·|g − attention(g)| over one token — no relative
        # tolerance applies; strict campaign seed 441)
        assert any(w in str(exc) for w in ("not finite in the limit", "only in the limit", "non-finite",
                                           "overflow", "is 0 in the limit")) or (
            curved and "Monte-Carlo standard error" in str(exc)), str(exc)
        return
    scale = np.sqrt(np.outer(np.abs(np.diag(K)), np.abs(np.diag(K))))
    # an output that vanishes in the limit (clip(|g − g|/2); |g − attention(g)| of one token, 0 up to the
    # rounding of its weight) has entries at rounding: their bounds are 1e-3 of the kernel's largest scale,
    # not of themselves (strict campaign seeds 73, 81, 408; Limit.checked, VANISHING_SCALE)
    top = scale.max()
    vanishing = scale < netsor.interpret.infinite.VANISHING_SCALE * top
    assert np.all(E <= 1e-3 * np.where(vanishing, top, scale) + 1e-300)


@pytest.mark.slow
@settings(FAST, max_examples=100)
@given(**KERNEL_PROGRAMS)
def test_more_random_programs_have_finite_symmetric_psd_consistent_kernels(recipe, B, d, seed, duplicate):
    """The same properties on 100 more programs (the default suite keeps 200, for time)."""
    check_kernel_properties(recipe, B, d, seed, duplicate)


def check_kernel_properties(recipe, B, d, seed, duplicate, near=0.0):
    p = build(recipe)
    X = inputs(B, d, seed, duplicate, near)
    result = kernel(p, X)
    if result is None:  # a limit out of reach even at 1e-3 (said by a NumericalError): nothing to check
        return
    K, E, rtol = result
    assert np.all(np.isfinite(K)) and np.all(np.isfinite(E))
    np.testing.assert_array_equal(K, K.T)
    lam = np.linalg.eigvalsh(K)
    assert lam[0] >= -(np.sqrt(np.sum(E * E)) + 1e-9 * max(lam[-1], 0.0))
    R = p.num_outputs
    for k in range(1, B):
        K12, E12 = netsor.limit(p, X[:k], X[k:], rtol=rtol, method="expectations").nngp(with_error=True)
        block, block_err = K[:k * R, k * R:], E[:k * R, k * R:]
        assert np.all(np.abs(K12 - block) <= E12 + block_err + 1e-15 * np.abs(K).max())


NTK_SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


#: relu(gate·relu(LN g)·g) and its gate: the gate's zero set was unknown, so every kink of the backward program
#: was hidden and its pairs went to QMC (NTK campaign seed 213: 156 s at rtol 1e-3; now 2.4 s at 1e-8)
GATED_RELUS_OF_A_LAYERNORM = Recipe(
    sigmas=((0.8, 0.0),), steps=(("layernorm", 564), ("traced", 938, 491, "gate*relu"), ("mul", 80, 108),
                                 ("traced", 938, 491, "gate*relu")),
    readouts=(((164, 849), 0.7, 0.0, False), ((164, 849), 0.7, 0.0, True)))


@settings(NTK_SETTINGS, max_examples=25)
@given(recipe=recipes(max_steps=4), B=st.integers(2, 3), seed=st.integers(0, 2**16))
@example(recipe=GATED_RELUS_OF_A_LAYERNORM, B=3, seed=825)
def test_random_programs_have_symmetric_ntks_dominating_their_nngp(recipe, B, seed):
    check_ntk_dominates_nngp(recipe, B, seed)


@pytest.mark.slow
@NTK_SETTINGS
@given(recipe=recipes(max_steps=4), B=st.integers(2, 3), seed=st.integers(0, 2**16))
def test_more_random_programs_have_symmetric_ntks_dominating_their_nngp(recipe, B, seed):
    """The same on 60 programs (the default suite keeps 25, for time)."""
    check_ntk_dominates_nngp(recipe, B, seed)


def check_ntk_dominates_nngp(recipe, B, seed):
    """The NTK is symmetric and ``NTK − NNGP`` is PSD within the two kernels' bounds (the NNGP is the readout's
    own term of the NTK)."""
    p = build(recipe)
    X = inputs(B, 4, seed)
    for rtol in (netsor.interpret.infinite.DEFAULT_RTOL, 1e-3):
        try:
            k = netsor.kernel(p, X, rtol=rtol, method="expectations")
            break
        except NumericalError as exc:
            assert any(w in str(exc) for w in ("rtol", "non-finite", "NaN", "only in the limit")), str(exc)
    else:
        return  # out of reach even at 1e-3 (said by a NumericalError)
    assert np.all(np.isfinite(k.ntk)) and np.all(np.isfinite(k.ntk_error))
    np.testing.assert_array_equal(k.ntk, k.ntk.T)
    gap = np.linalg.eigvalsh(k.ntk - k.nngp)
    bound = np.sqrt(np.sum(k.ntk_error**2)) + np.sqrt(np.sum(k.nngp_error**2))
    assert gap[0] >= -(bound + 1e-9 * max(gap[-1], 0.0))


#: Input sets of the traced-against-opaque tests: random, or the second input 1e-3 from the first (nearly parallel:
#: a user's φ' without a jump was taken as possibly discontinuous there, and an opaque identity's NTK was refused)
NEAR = st.sampled_from([0.0, 0.0, 1e-3])


#: ``where(x > 0, log(x + 1), x)``: its derivative's ``1/(x + 1)`` was not known to be singular (a derived φ' was
#: taken as finite everywhere), so the NTK's product with the selection was NaN at ``x = −1`` (fresh-seed campaign)
GUARDED_LOG = ("guard", ("x",), 0.0, "log")
#: ``|x| + 0.01`` opaque at inputs 1e-6 apart: its kink located 1.1e-16 off 0, the closed form's Owen's-T arguments
#: cancelled to ε/s and the pair was 6.7e-13 off under a bound of 2.8e-14 (fresh-seed campaign; now counted)
SHIFTED_ABS = ("abs", ("abs", ("x",), 0.0), -0.01)


@settings(NTK_SETTINGS, max_examples=60)
@given(tree=activation_trees(), scale=st.sampled_from([0.6, 1.0, 1.7]), sigma_b=st.sampled_from([0.0, 0.3]),
       seed=st.integers(0, 2**16), near=NEAR)
@example(tree=GUARDED_LOG, scale=0.6, sigma_b=0.0, seed=0, near=0.0)
@example(tree=SHIFTED_ABS, scale=0.6, sigma_b=0.0, seed=0, near=1e-6)
def test_random_numpy_activations_traced_have_the_kernels_of_the_same_function_opaque(tree, scale, sigma_b, seed,
                                                                                      near):
    check_traced_against_opaque(tree, scale, sigma_b, seed, near)


@pytest.mark.slow
@settings(NTK_SETTINGS, max_examples=300)
@given(tree=activation_trees(max_leaves=10), scale=st.sampled_from([0.6, 1.0, 1.7]),
       sigma_b=st.sampled_from([0.0, 0.3]), seed=st.integers(0, 2**16), near=NEAR)
def test_more_random_numpy_activations_traced_have_the_kernels_of_the_same_function_opaque(tree, scale, sigma_b,
                                                                                           seed, near):
    """The same on 300 larger trees (the default suite keeps 60, for time)."""
    check_traced_against_opaque(tree, scale, sigma_b, seed, near)


@settings(NTK_SETTINGS, max_examples=20)
@given(tree=activation_trees(), scale=st.sampled_from([0.6, 1.0, 1.7]), sigma_b=st.sampled_from([0.0, 0.3]),
       seed=st.integers(0, 2**16))
def test_random_numpy_activations_opaque_without_a_derivative_have_the_kernels_of_the_same_function_traced(
        tree, scale, sigma_b, seed):
    """The same with the opaque φ' a central difference: the NTK of an opaque tanh was refused (the difference's
    rounding failed the kink locator's test on every panel), and one with a jump was refused or missed its
    spike (half of the random jump positions: 1e-7 off within a bound of 2e-9). Random inputs here; nearly
    parallel ones (clipped functions take ~8 s each there: φ' is discontinuous and its values approximate) slow."""
    check_traced_against_opaque(tree, scale, sigma_b, seed, 0.0, given_derivative=False)


@pytest.mark.slow
@settings(NTK_SETTINGS, max_examples=80)
@given(tree=activation_trees(max_leaves=8), scale=st.sampled_from([0.6, 1.0, 1.7]),
       sigma_b=st.sampled_from([0.0, 0.3]), seed=st.integers(0, 2**16), near=NEAR)
def test_more_random_numpy_activations_opaque_without_a_derivative_have_the_kernels_of_the_same_function_traced(
        tree, scale, sigma_b, seed, near):
    """The same on 80 larger trees, inputs nearly parallel too."""
    check_traced_against_opaque(tree, scale, sigma_b, seed, near, given_derivative=False)


#: clip(x, −½, ½) bias-free at inputs 1e-6 from anti-parallel: an odd network keeps them anti-parallel, and the
#: covariances held the angle π − θ to ½-Hölder digits (NTK bound 8.4e-7 relative, refused; fresh-seed campaign).
ODD_CLIP = ("clip", ("x",), 0.0, 0.0)


@settings(NTK_SETTINGS, max_examples=12)
@given(tree=activation_trees(max_leaves=5, piecewise_linear=True), sigma_w=st.sampled_from([0.9, 1.5]),
       sigma_b=st.sampled_from([0.0, 0.1, 0.5]), seed=st.integers(0, 2**16),
       near=st.sampled_from([1e-8, 1e-6, -1e-6, -1e-8, -1e-4, 1e-4]), depth=st.integers(2, 4))
@example(tree=ODD_CLIP, sigma_w=0.9, sigma_b=0.0, seed=0, near=-1e-6, depth=2)
def test_random_piecewise_linear_activations_at_inputs_a_perturbation_apart_meet_the_default_rtol(
        tree, sigma_w, sigma_b, seed, near, depth):
    """Continuous piecewise-linear activations written with numpy (max, clip, ``|t − c|``, affine maps and sums: kinks
    anywhere) in MLPs of depth 2–4 on inputs 1e-8 … 1e-4 apart (or nearly anti-parallel: bias-free odd φ keep them so,
    their angle carried by the sums, :class:`~netsor.interpret.infinite.SumDistance`): the NNGP and NTK meet the
    default rtol — their step kernels from the angle, carried by the kinked functions' distances
    (:mod:`netsor.gaussian.near_parallel`). A campaign of 60 such programs: 20 refused before, none now; the values
    are checked against 30-digit recursions in ``tests/test_near_parallel.py``."""
    fn = lambda x: evaluate(tree, x)  # noqa: E731
    assume(np.ptp(fn(np.linspace(-4.0, 4.0, 401))) > 1e-3)
    X = inputs(3, 4, seed, near=near)
    k = netsor.kernel(netsor.zoo.mlp(depth, fn, sigma_w, sigma_b), X)
    for K, E in ((k.nngp, k.nngp_error), (k.ntk, k.ntk_error)):
        assert np.all(np.isfinite(K)) and np.all(E <= 1e-8 * np.sqrt(np.outer(np.diag(K), np.diag(K))) + 1e-300)


#: Smooth parts of the kinked + smooth activations: ``(s, s')``.
SMOOTH_PARTS = {"tanh": (np.tanh, lambda t: 1.0 / np.cosh(t) ** 2), "sin": (np.sin, np.cos),
                "erf": (special.erf, lambda t: 2.0 / np.sqrt(np.pi) * np.exp(-t * t)),
                "gauss": (lambda t: np.exp(-t * t), lambda t: -2.0 * t * np.exp(-t * t))}
KINKED_PLUS_SMOOTH = dict(tree=activation_trees(max_leaves=5, piecewise_linear=True),
                          smooth=st.sampled_from(sorted(SMOOTH_PARTS)), alpha=st.sampled_from([0.5, 1.0, 2.0]),
                          beta=st.integers(-50, 50).map(lambda k: k / 100), weight=st.sampled_from([0.05, 0.3, 1.0]),
                          sigma_w=st.sampled_from([0.9, 1.5]), sigma_b=st.sampled_from([0.0, 0.1, 0.5]),
                          seed=st.integers(0, 2**16))


def check_kinked_plus_smooth_against_quadrature(tree, smooth, alpha, beta, weight, sigma_w, sigma_b, seed, near,
                                                depth):
    """``φ(x) = ℓ(x) + w·s(αx + β)`` (ℓ a random continuous piecewise-linear tree, s tanh, sin, erf or a Gaussian
    bump) in an MLP at two inputs ``near`` apart: φ' jumps and the pairs of φ' have no closed form. Its NNGP and
    NTK are within their bounds of a recursion by nested quadrature split at ℓ's kinks (located independently of
    the engine, :func:`references.piecewise_linear_pieces`), up to that reference's own accuracy (its change from
    40 to 80 nodes a panel, and 1-D quadratures at 1e-13 relative), or the engine refuses saying rtol is out of reach. A
    campaign of 60 such cases: no bound below its error; 6 refused with the χ² bound (up to 0.2 relative), 3 with
    the change by angle (:func:`netsor.interpret.infinite._change_by_angle`; within 5.5× of rtol)."""
    shape, d_shape = SMOOTH_PARTS[smooth]
    fn = lambda x: evaluate(tree, x) + weight * shape(alpha * x + beta)  # noqa: E731
    kinks, slopes = references.piecewise_linear_pieces(lambda x: evaluate(tree, x))

    def deriv(x):
        x = np.asarray(x, dtype=float)
        return slopes[np.searchsorted(kinks, x)] + weight * alpha * d_shape(alpha * x + beta)

    X = inputs(2, 4, seed, near=near)
    try:
        k = netsor.kernel(netsor.zoo.mlp(depth, fn, sigma_w, sigma_b), X)
    except NumericalError as exc:
        assert "rtol" in str(exc), str(exc)
        return
    # the reference at 80 nodes a panel, its change from 40 allowed as its error (Gauss–Legendre converges
    # geometrically: the finer rule's error is far below that change), beside 1e-12 for the 1-D quadratures
    coarse, fine = (references.piecewise_mlp_kernels(fn, deriv, tuple(kinks), X, depth=depth, sigma_w=sigma_w,
                                                     sigma_b=sigma_b, nodes=nodes) for nodes in (40, 80))
    for got, err, ref, ref_coarse in ((k.nngp, k.nngp_error, fine[0], coarse[0]),
                                      (k.ntk, k.ntk_error, fine[1], coarse[1])):
        scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
        allowed = err + np.abs(ref - ref_coarse) + 1e-12 * scale
        assert np.all(np.abs(got - ref) <= allowed), (np.abs(got - ref) / scale, err / scale)
        assert np.all(err <= 1e-8 * scale)


@settings(NTK_SETTINGS, max_examples=4)
@given(**KINKED_PLUS_SMOOTH, near=st.sampled_from([1e-3, -1e-4]))
def test_random_kinked_plus_smooth_activations_at_inputs_a_little_apart_have_bounds_covering_quadrature(
        tree, smooth, alpha, beta, weight, sigma_w, sigma_b, seed, near):
    check_kinked_plus_smooth_against_quadrature(tree, smooth, alpha, beta, weight, sigma_w, sigma_b, seed, near, 2)


@pytest.mark.slow
@settings(NTK_SETTINGS, max_examples=30)
@given(**KINKED_PLUS_SMOOTH, near=st.sampled_from([1e-3, 1e-4, -1e-4, 1e-5, -1e-5, -1e-7]), depth=st.integers(2, 3))
def test_more_random_kinked_plus_smooth_activations_at_inputs_a_little_apart_have_bounds_covering_quadrature(
        tree, smooth, alpha, beta, weight, sigma_w, sigma_b, seed, near, depth):
    """The same at depth 2–3 and inputs down to 1e-5 apart."""
    check_kinked_plus_smooth_against_quadrature(tree, smooth, alpha, beta, weight, sigma_w, sigma_b, seed, near,
                                                depth)


def check_traced_against_opaque(tree, scale, sigma_b, seed, near=0.0, given_derivative=True):
    """An activation written with numpy (``zoo.mlp(2, fn)``) is traced: exact kinks, derivative and closed
    forms. The same function made opaque (its argument converted to an array), with the derivative given as
    the traced expression's, goes the other way: kinks located numerically, one-dimensional quadrature of the
    user's functions. Their NNGP and NTK agree within the sum of the two reported bounds (and the rounding of
    a few ulps of the scale), or the engine refuses saying the tolerance is out of reach. This grammar found
    a one-form pair rule off by 1e-7 within a bound of 1e-11, a NaN error bound returned silently, a derivative's
    bump the kink locator missed, nested clips refused at 1e38, and a user's φ' taken as discontinuous.
    Without ``given_derivative`` the opaque φ' is a central difference, read beside φ's kinks and jumps."""
    fn = lambda x: evaluate(tree, x)  # noqa: E731
    p = netsor.Program()
    g = p.input(p.dim("n"))
    expr = p.line_of(netsor.nonlin(fn, g)).expr
    grid = np.linspace(-4.0, 4.0, 401)
    assume(np.ptp(fn(grid)) > 1e-3)  # a constant activation has a constant kernel and an NTK of the readout only

    def deriv(x):
        x = np.asarray(x, dtype=float)
        return np.broadcast_to(expr.derivative({g: x}, g), np.shape(x))

    opaque = netsor.activation(lambda x: fn(np.asarray(x, dtype=float)), deriv=deriv if given_derivative else None,
                               name="opaque")
    X = inputs(3, 4, seed, near=near) * scale
    try:
        traced = netsor.kernel(netsor.zoo.mlp(2, fn, sigma_b=sigma_b), X, rtol=1e-6)
        other = netsor.kernel(netsor.zoo.mlp(2, opaque, sigma_b=sigma_b), X, rtol=1e-6)
    except NumericalError as exc:
        assert "rtol" in str(exc), str(exc)
        return
    for name in ("nngp", "ntk"):
        a, b = getattr(traced, name), getattr(other, name)
        bound = getattr(traced, name + "_error") + getattr(other, name + "_error")
        scale_ab = np.sqrt(np.outer(np.abs(np.diag(a)), np.abs(np.diag(a))))
        assert np.all(np.abs(a - b) <= bound + 1e-13 * scale_ab), (name, np.max(np.abs(a - b)), np.max(bound))


def check_tangent_against_backward(p: netsor.Program, X, backward: str, rtol: float) -> None:
    """The NTK of the tangent program (the default) and of the backward program ``backward`` are
    the same number (gradient independence is exact without transposes; the exact backward pass
    with them): they agree within the sum of their bounds wherever both are computed."""
    try:
        forward = netsor.kernel(p, X, get="ntk", rtol=rtol, method="expectations")
        backward_k = netsor.kernel(p, X, get="ntk", rtol=rtol, method="expectations", backward=backward)
    except netsor.UnsupportedError:
        return  # a program the expectation engine does not take (it says why; e.g. relu(θ) inside a vector's line)
    except NumericalError as exc:
        assert any(w in str(exc) for w in ("rtol", "non-finite", "NaN", "only in the limit")), str(exc)
        return
    scale = np.sqrt(np.outer(np.abs(np.diag(backward_k.ntk)), np.abs(np.diag(backward_k.ntk))))
    assert np.all(np.abs(forward.ntk - backward_k.ntk) <= forward.ntk_error + backward_k.ntk_error + 1e-12 * scale)


#: A read-out vector constant in the parameters (``abs(g − g) = 0``): its tangent is the zero vector
#: (tangent campaign seed 301: "has no NTK").
CONSTANT_READOUT = Recipe(sigmas=((1.0, 0.0),), steps=(("traced", 79, 5, "abs-diff"),),
                          readouts=(((5,), 1.0, 0.0, False),))


#: An attention over abs-differences whose last vector is constant in the parameters: its tangent, an
#: empty LinComb, was a bare 0.0 at finite width (the tie check's finite run; tangent campaign seed 303).
ZERO_TANGENT_AT_FINITE_WIDTH = Recipe(
    sigmas=((1.2, 0.3),), steps=(("matmul", 508, 3, 1.0), ("traced", 667, 191, "abs-diff"),
                                 ("attention", 432, 2, 1.0), ("traced", 267, 324, "abs-diff")),
    readouts=(((2,), 1.0, 0.0, False),))


@NTK_SETTINGS
@given(recipe=recipes(max_steps=4), B=st.integers(2, 3), seed=st.integers(0, 2**16))
@example(recipe=CONSTANT_READOUT, B=2, seed=0)
@example(recipe=ZERO_TANGENT_AT_FINITE_WIDTH, B=2, seed=1)
def test_random_programs_tangent_ntk_is_the_gradient_independent_ntk(recipe, B, seed):
    check_tangent_against_backward(build(recipe), inputs(B, 4, seed), "independent", 1e-6)


@settings(NTK_SETTINGS, max_examples=40)
@given(recipe=transpose_recipes(max_steps=6), seed=st.integers(0, 2**16))
def test_random_transposed_programs_tangent_ntk_is_the_exact_ntk(recipe, seed):
    p = build_transposed(recipe)
    check_tangent_against_backward(p, inputs(2, 3, seed) if recipe.data else None, "exact", 1e-6)


SLOW = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@pytest.mark.slow
@SLOW
@given(recipe=recipes(max_steps=4), seed=st.integers(0, 2**16))
def test_random_programs_at_large_width_agree_with_the_limit(recipe, seed):
    assert_large_width_agrees_with_the_limit(build(recipe), inputs(3, 4, seed), seed)


@pytest.mark.slow
@SLOW
@given(recipe=recipes(max_steps=4), seed=st.integers(0, 2**16))
def test_random_programs_on_inputs_of_unit_first_layer_variance_at_large_width_agree_with_the_limit(recipe, seed):
    """Inputs scaled so that the first input layer's variance is 1 at every input (normalised data): a
    LayerNorm of it is then the layer itself in the limit, and a jump between the two a tie of the limit
    only, which the engine must refuse (:mod:`netsor.interpret.ties`) — wide networks do not converge to
    its ``step(0) = 0`` — or agree with."""
    sigma, bias = recipe.sigmas[0]
    X = inputs(3, 4, seed)
    X *= np.sqrt(4 * max(1.0 - bias**2, 0.0)) / sigma / np.linalg.norm(X, axis=1, keepdims=True)
    assert_large_width_agrees_with_the_limit(build(recipe), X, seed)


def assert_large_width_agrees_with_the_limit(p, X, seed):
    """The engine's kernel (skipped where out of its reach or refused as having no limit) and networks of
    widths 1024 and 2048 (300 each), extrapolated in 1/n, agree within 4.5 standard errors plus its bound."""
    result = kernel(p, X)
    assume(result is not None)
    K, E, _ = result
    extrapolated, se = extrapolated_in_width(lambda width: netsor.run_finite(
        p, X, width=width, samples=300, seed=seed + width, return_kernels=True).kernels, (1024, 2048))
    scale = np.sqrt(np.outer(np.diag(K), np.diag(K)))
    assert np.all(np.abs(extrapolated - K) <= 4.5 * se + E + 1e-9 * scale)


def extrapolated_in_width(samples, widths):
    """``2 m(2n) − m(n)`` of the sample means at ``widths = (n, 2n)`` (removes the O(1/n) bias) and its standard
    error; ``samples(width)``: an array (samples, ...)."""
    draws = [samples(width) for width in widths]
    means = [d.mean(axis=0) for d in draws]
    ses = [d.std(axis=0, ddof=1) / np.sqrt(d.shape[0]) for d in draws]
    return 2 * means[1] - means[0], np.sqrt(4 * ses[1] ** 2 + ses[0] ** 2)


@pytest.mark.slow
@SLOW
@given(recipe=recipes(max_steps=4), seed=st.integers(0, 2**16))
def test_random_programs_empirical_ntk_at_large_width_agrees_with_the_limit(recipe, seed):
    assert_empirical_ntk_agrees_with_the_limit(build(recipe), inputs(3, 4, seed), seed)


@pytest.mark.slow
@SLOW
@given(recipe=transpose_recipes(max_steps=6), seed=st.integers(0, 2**16))
def test_random_transposed_programs_empirical_ntk_at_large_width_agrees_with_the_exact_limit(recipe, seed):
    """Netsor⊤ programs (uses of a matrix both ways): the finite networks' reverse-mode NTK, through the real
    transposes, against the limit's exact NTK."""
    p = build_transposed(recipe)
    assert_empirical_ntk_agrees_with_the_limit(p, inputs(2, 3, seed) if recipe.data else None, seed)


def assert_empirical_ntk_agrees_with_the_limit(p, X, seed):
    """The limit's NTK (the tangent program; skipped where out of the engine's reach or not taken by it) and
    the mean empirical NTK of 150 networks at widths 512 and 1024 (exact reverse-mode differentiation of the
    finite interpreter), extrapolated in 1/n, agree within 4.5 standard errors plus the limit's bound. A
    campaign of 60 + 60 fresh programs before this test: largest deviations 2.9 and 2.5 such units."""
    try:
        k = netsor.kernel(p, X, get="ntk", rtol=1e-6, method="expectations")
    except netsor.UnsupportedError:
        assume(False)
    except NumericalError as exc:
        assert any(w in str(exc) for w in ("rtol", "non-finite", "NaN", "only in the limit", "is 0 in the limit")), \
            str(exc)
        assume(False)
    extrapolated, se = extrapolated_in_width(
        lambda width: netsor.empirical_ntk(p, X, width=width, samples=150, seed=seed + width), (512, 1024))
    scale = np.sqrt(np.outer(np.abs(np.diag(k.ntk)), np.abs(np.diag(k.ntk))))
    assert np.all(np.abs(extrapolated - k.ntk) <= 4.5 * se + k.ntk_error + 1e-9 * scale)


SIMULATION_SETTINGS = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                               suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


#: |g − hard_tanh(g)|/2 at small inputs: nonzero on a rare event, the simulation takes more rounds (seed 29292)
RARE_OUTPUT = Recipe(sigmas=((0.8, 0.0),), steps=(("act", 474, "hard_tanh"), ("traced", 412, 157, "abs-diff"),
                                                  ("traced", 412, 157, "abs-diff"), ("layernorm", 325)),
                     readouts=(((1, 327), 1.0, 0.0, False),))
#: |g' − g|/2 with g' = a·g, a = 1 the softmax weight of one token, through a matrix: exactly 0 in the limit
#: (the engine's tie), rounding residues in the simulation, which refuses (seed 29292)
ZERO_OUTPUT = Recipe(sigmas=((0.8, 0.0),), steps=(("attention", 0, 0, 0.5), ("traced", 0, 1, "abs-diff"),
                                                  ("matmul", 0, 0, 0.5), ("bias", 0.2)),
                     readouts=(((327,), 1.0, 0.0, False),))
#: |g − g| = 0 through a matrix into LayerNorm: 1/√0 in the limit, refused naming the scalar (seed 21212)
ZERO_VARIANCE_LAYERNORM = Recipe(sigmas=((0.8, 0.0),), steps=(("traced", 0, 0, "abs-diff"), ("matmul", 1, 0, 0.5),
                                                              ("layernorm", 1), ("matmul", 0, 0, 0.5)),
                                 readouts=(((448,), 1.0, 0.0, False),))


@SIMULATION_SETTINGS
@given(recipe=recipes(max_steps=4, opaque=True), B=st.integers(2, 3), seed=st.integers(0, 2**16))
@example(recipe=ZERO_VARIANCE_LAYERNORM, B=2, seed=0)
@example(recipe=RARE_OUTPUT, B=2, seed=0)
@example(recipe=ZERO_OUTPUT, B=2, seed=0)
def test_random_programs_simulated_limit_agrees_with_the_expectation_engine(recipe, B, seed):
    """Two independent interpreters of the limit: the expectation engine and the joint QMC
    simulation (16 × 2^12 copies, more where an output is a rare event: |g − hard_tanh(g)| at small
    inputs) agree within the sum of their bounds."""
    p = build(recipe)
    X = inputs(B, 3, seed)
    assert assert_engine_agrees_with_simulation(p, X, seed).points >= 2**12


@settings(SIMULATION_SETTINGS, max_examples=150)
@given(recipe=transpose_recipes(max_steps=7), seed=st.integers(0, 2**16))
def test_random_transposed_programs_simulated_limit_agrees_with_the_expectation_engine(recipe, seed):
    """Netsor⊤: the engine's kernel is finite, exactly symmetric and PSD within its bounds, and the
    simulation's Ż (Stein's lemma on its copies) meets the engine's (exact for linear programs,
    symbolic derivatives integrated at 1e-12 for nonlinear data-free ones, per-input scalars of the
    limit with data), on random programs with a rectangular and a square matrix used both ways;
    programs the engine refuses (non-Gaussian Ż) are skipped."""
    p = build_transposed(recipe)
    X = inputs(2, 3, seed) if recipe.data else None
    try:
        K, E = netsor.limit(p, X, rtol=1e-6).nngp(with_error=True, psd="skip")
    except (netsor.UnsupportedError, NumericalError):
        assume(False)
    assert np.all(np.isfinite(K)) and np.all(np.isfinite(E))
    np.testing.assert_array_equal(K, K.T)
    lam = np.linalg.eigvalsh(K)
    assert lam[0] >= -(np.sqrt(np.sum(E * E)) + 1e-9 * max(lam[-1], 0.0))
    K_sim, E_sim = SimulatedLimit(p, X, rtol=1.0, seed=seed).nngp(psd="skip", with_error=True)
    scale = np.sqrt(np.outer(np.abs(np.diag(K)), np.abs(np.diag(K))))
    assert np.all(np.abs(K_sim - K) <= E + E_sim + 1e-12 * scale)


@settings(SIMULATION_SETTINGS, max_examples=80)
@given(recipe=transpose_recipes(max_steps=6), seed=st.integers(0, 2**16))
def test_random_transposed_programs_exact_ntk_simulated_agrees_with_the_expectation_engine(recipe, seed):
    """The exact NTK (real transposes in the backward program; NetsorK scalars held, their gradients
    vanishing in the limit) of random Netsor⊤ programs: the engine's NTK is symmetric and at least
    its NNGP's share (the readout term) on the diagonal, and the simulation of the same gradient
    program (one round of 16 × 2^12 copies) agrees with it within the sum of their bounds."""
    p = build_transposed(recipe)
    X = inputs(2, 3, seed) if recipe.data else None
    try:
        k = netsor.kernel(p, X, rtol=1e-6, method="expectations", backward="exact")
    except (netsor.UnsupportedError, NumericalError):
        assume(False)
    assert np.all(np.isfinite(k.ntk)) and np.all(np.isfinite(k.ntk_error))
    np.testing.assert_array_equal(k.ntk, k.ntk.T)
    assert np.all(np.diag(k.ntk) >= np.diag(k.nngp) - np.diag(k.ntk_error) - np.diag(k.nngp_error))
    sim = netsor.kernel(p, X, get="ntk", rtol=1.0, method="qmc", backward="exact", seed=seed)
    scale = np.sqrt(np.outer(np.abs(np.diag(k.ntk)), np.abs(np.diag(k.ntk))))
    assert np.all(np.abs(sim.ntk - k.ntk) <= k.ntk_error + sim.ntk_error + 1e-12 * scale)


@settings(SIMULATION_SETTINGS, max_examples=30)
@given(recipe=transpose_recipes(max_steps=6), seed=st.integers(0, 2**16))
def test_random_transposed_programs_coupled_run_is_the_sampler_and_converges(recipe, seed):
    """Netsor⊤ in the coupled run, on programs whose limit has corrections Ż (others skipped): its
    finite side is the matrix-free sampler draw for draw, and the coupling distance of every vector
    with a correction falls by at least 2.5 from width 64 to 1024 within 3 standard errors (theory: 4,
    n^{-1/2}; a limit world whose Ż is 10 % off leaves a floor and fails this)."""
    p = build_transposed(recipe)
    X = inputs(2, 3, seed) if recipe.data else np.ones((1, 1))
    try:
        lim = netsor.limit(p, None if not recipe.data else X, rtol=1e-6, method="expectations")
        corrected = [v.name for v, terms in lim.analysis.corrections.items() if terms]
    except (netsor.UnsupportedError, NumericalError):
        assume(False)
    assume(corrected)
    try:  # the coupled run integrates more than the limit's lines (its per-line costs): it may refuse too
        runs = {w: netsor.coupled(p, X, width=w, samples=30, seed=seed, rtol=1e-6) for w in (64, 1024)}
    except NumericalError:
        assume(False)
    finite = netsor.sample(p, X, width=64, samples=30, seed=seed, method="matrix-free")
    np.testing.assert_array_equal(runs[64].outputs_finite, finite)
    for name in corrected:
        costs = {w: np.asarray(run.line_costs[name], dtype=float).ravel() for w, run in runs.items()}
        assert np.all(np.isfinite(costs[64])) and np.all(np.isfinite(costs[1024])), name
        # the mean costs (squared distances) fall 16× in theory; ≥ 2.5² within 3 standard errors of
        # their ratio (delta method: each mean of 30 heavy-tailed costs is ~20 % uncertain)
        mean = {w: c.mean() for w, c in costs.items()}
        rel = [c.std(ddof=1) / np.sqrt(c.size) / mean[w] for w, c in costs.items()]
        ratio = mean[64] / mean[1024]
        assert ratio + 3 * ratio * np.hypot(*rel) >= 2.5**2, (name, mean, rel)


#: A scalar softmax over one token makes s = e^θ · (1/e^θ) = 1 up to rounding, so g₁ − s·g₁ has zero
#: variance: the mean of gate(g₁ − g₇) had an error on a zero envelope, a relative bound of inf, and
#: inf · 0 gave NaN bounds (or "no finite error bound") off the diagonal (campaign seed 17171).
ZERO_VARIANCE_GATE = Recipe(sigmas=((0.8, 0.0),), steps=(("attention", 0, 0, 0.5), ("gates", 0, 1, "gate3")),
                            readouts=(((0, 86), 1.0, 0.0, False),))


@settings(SIMULATION_SETTINGS, max_examples=15)
@given(recipe=recipes(max_steps=3, gates=True), B=st.integers(2, 3), seed=st.integers(0, 2**16))
@example(recipe=ZERO_VARIANCE_GATE, B=2, seed=0)
@example(recipe=dataclasses.replace(ZERO_VARIANCE_GATE, readouts=(((86,), 1.0, 0.0, False),)), B=2, seed=0)
def test_random_programs_with_gate_products_simulated_limit_agrees_with_the_expectation_engine(recipe, B, seed):
    """Products of normal-CDF gates of two vectors of a random program (cone moments of up to 6 dependent
    gate forms: the Genz rule, or nested quadrature and the Mehler series where smooth and of rank ≤ 2):
    the engine and the simulation agree within the sum of their bounds (tracing three gates found a
    same-point product evaluated with its covariance in the wrong argument order, off by 0.12)."""
    assert_engine_agrees_with_simulation(build(recipe), inputs(B, 3, seed), seed)


@pytest.mark.slow
@settings(SIMULATION_SETTINGS, max_examples=60)
@given(recipe=recipes(max_steps=3, gates=True), B=st.integers(2, 3), seed=st.integers(0, 2**16))
def test_more_random_programs_with_gate_products_simulated_limit_agrees_with_the_expectation_engine(recipe, B, seed):
    """The same on 60 programs (the default suite keeps 15, for time)."""
    assert_engine_agrees_with_simulation(build(recipe), inputs(B, 3, seed), seed)


@settings(FAST, max_examples=40)
@given(recipe=recipes(max_steps=3, gates=True), B=st.integers(2, 4), d=st.integers(3, 6), seed=st.integers(0, 2**16),
       duplicate=st.booleans())
def test_random_programs_with_gate_products_have_finite_symmetric_psd_consistent_kernels(recipe, B, d, seed,
                                                                                         duplicate):
    check_kernel_properties(recipe, B, d, seed, duplicate)


BATCHNORM_PROGRAMS = dict(recipe=recipes(max_steps=4, opaque=True, batchnorm=True), seed=st.integers(0, 2**16),
                          points=st.integers(1, 2))


def assert_batchnorm_engine_agrees_with_simulation(recipe, seed, points):
    """One input (a batch at one point: exact for homogeneous activations, joint quadrature/QMC
    otherwise) or two (two batches: the two-dimensional Laplace integrals where both sides are
    BatchNorm forms of homogeneous activations; other cross-batch terms are refused, saying so)."""
    p, X = build(recipe), inputs(points, 3, seed)
    try:
        result = kernel(p, X)
    except netsor.UnsupportedError as exc:  # refused up front, before any expectation
        assert points > 1 and "BatchNorm" in str(exc), str(exc)
        assume(False)
    assert_engine_agrees_with_simulation(p, X, seed, result)


#: BatchNorm over a batch with a member that is 0 (W·0 of a traced |g − g|): the error propagation's
#: difference steps of its exact entries were 0, which asked the Laplace integral for tolerance 0 (its
#: tails at log 0: a raw OverflowError; random-program campaign seed 1001).
BATCHNORM_WITH_A_ZERO_MEMBER = Recipe(
    sigmas=((1.0, 0.0), (1.0, 0.0)),
    steps=(("traced", 723, 891, "abs-diff"), ("matmul", 685, 3, 0.9), ("matmul", 194, 0, 0.5), ("matmul", 685, 3, 0.9),
           ("opaque", 193, 168), ("batchnorm", 727, "relu")),
    readouts=(((53, 1), 1.0, 0.0, False), ((0, 487), 1.0, 0.0, False)))


@settings(SIMULATION_SETTINGS, max_examples=8)
@given(**BATCHNORM_PROGRAMS)
@example(recipe=BATCHNORM_WITH_A_ZERO_MEMBER, seed=1, points=1)
def test_random_batchnorm_programs_simulated_limit_agrees_with_the_expectation_engine(recipe, seed, points):
    """BatchNorm across random G-vectors, on one batch or two: the two interpreters agree."""
    assert_batchnorm_engine_agrees_with_simulation(recipe, seed, points)


@pytest.mark.slow
@settings(SIMULATION_SETTINGS, max_examples=100)
@given(**BATCHNORM_PROGRAMS)
def test_more_random_batchnorm_programs_simulated_limit_agrees_with_the_expectation_engine(recipe, seed, points):
    """The same on 100 more BatchNorm programs (the default suite keeps 8, for time: ~2 s each)."""
    assert_batchnorm_engine_agrees_with_simulation(recipe, seed, points)



@settings(SIMULATION_SETTINGS, max_examples=15)
@given(recipe=recipes(max_steps=4, opaque=True), seed=st.integers(0, 2**16))
def test_random_programs_on_exactly_proportional_inputs(recipe, seed):
    """Inputs x, z, 2x, −x, z/2 — exactly proportional pairs, which the engine takes from per-point
    values or exact ±1 correlations where the program says how its vectors scale
    (netsor/ir/homogeneity.py). Draw by draw at finite width (dense sampler, same seed) every vector
    with a known scaling λ satisfies v(s·X) = λ v(X); and the engine's kernel agrees with the joint
    QMC simulation within the sum of their bounds."""
    from netsor.interpret.finite import run_finite
    from netsor.ir.homogeneity import input_scaling

    p = build(recipe)
    x, z = np.random.default_rng(seed).standard_normal((2, 3))
    X = np.stack([x, z, 2 * x, -x, 0.5 * z])
    vectors = [ln.out for ln in p.lines if ln.out.kind in ("G", "H")]
    base = run_finite(p, X[:2], width=8, samples=1, seed=seed, method="dense", vectors=vectors).vectors
    for s in (2.0, -1.0):
        scaled = run_finite(p, s * X[:2], width=8, samples=1, seed=seed, method="dense", vectors=vectors).vectors
        for v in vectors:
            lam = float(input_scaling(p, v, np.array([s]))[0])
            if np.isfinite(lam):
                np.testing.assert_allclose(scaled[v], lam * base[v], rtol=1e-10, atol=1e-12, err_msg=v.name)
    assert_engine_agrees_with_simulation(p, X, seed)


@pytest.mark.slow
@settings(SIMULATION_SETTINGS, max_examples=8)
@given(activation=st.sampled_from(ACTIVATIONS), sigma_u=st.sampled_from([0.7, 1.0, 1.5]),
       sigma_b=st.sampled_from([0.0, 0.3]), batch=st.integers(6, 8), d=st.integers(5, 10), seed=st.integers(0, 2**16))
def test_random_batchnorm_ntks_integrated_radius_agrees_with_sampled_radius(activation, sigma_u, sigma_b, batch, d,
                                                                            seed):
    """The BatchNorm NTK with the batch radius integrated exactly (netsor/interpret/radial.py) and with
    the radius sampled (finite variance: batches of 6–8 in ≥ 5 input dimensions, centred rank ≥ 5)
    estimate the same kernel within the sum of their bounds, for random activations, scales and
    biases (depth 1: a depth-2 pair takes ~1 minute)."""
    from netsor.interpret import ntk as ntk_module

    p = netsor.zoo.batchnorm_mlp(1, activation, sigma_b=sigma_b, sigma_u=sigma_u, batch=batch)
    X = np.random.default_rng(seed).standard_normal((1, batch, d))
    try:
        integrated = netsor.kernel(p, X, rtol=3e-2, method="qmc", seed=seed)
    except netsor.UnsupportedError:
        assume(False)
    original = ntk_module.radial_program
    ntk_module.radial_program = lambda program, pairs: None  # the sampled radius
    try:
        sampled = netsor.kernel(p, X, rtol=3e-2, method="qmc", seed=seed + 1)
    finally:
        ntk_module.radial_program = original
    assert np.all(np.isfinite(integrated.ntk)) and np.all(np.isfinite(integrated.ntk_error))
    assert np.all(np.abs(integrated.ntk - sampled.ntk) <= integrated.ntk_error + sampled.ntk_error)


# ---- traced sums and products of netsor's activations --------------------------------------------------------
ACTIVATION_SUM_PROGRAMS = dict(recipe=recipes(max_steps=4, activation_sums=True), B=st.integers(2, 4),
                               d=st.integers(3, 6), seed=st.integers(0, 2**16),
                               near=st.sampled_from([0.0, 1e-6, -1e-6]))


@settings(FAST, max_examples=10)
@given(**ACTIVATION_SUM_PROGRAMS)
def test_random_programs_with_activation_sums_have_consistent_kernels(recipe, B, d, seed, near):
    """A traced function of netsor's activations in every program (``2·step(u) − step(−u) + 1``, ``relu(u) +
    0.01u``, ``gelu(u)·step(v)``, ...: Apply nodes with their own rules since the tracer reads them), a third of
    them on a nearly identical or nearly anti-parallel pair of inputs: finite, symmetric, PSD kernels whose cross
    blocks equal the blocks of the joint kernel within their bounds."""
    check_kernel_properties(recipe, B, d, seed, duplicate=False, near=near)


@pytest.mark.slow
@settings(FAST, max_examples=50)
@given(**ACTIVATION_SUM_PROGRAMS)
def test_more_random_programs_with_activation_sums_have_consistent_kernels(recipe, B, d, seed, near):
    check_kernel_properties(recipe, B, d, seed, duplicate=False, near=near)


@settings(SIMULATION_SETTINGS, max_examples=8)
@given(recipe=recipes(max_steps=3, activation_sums=True), B=st.integers(2, 3), seed=st.integers(0, 2**16))
def test_random_programs_with_activation_sums_simulated_limit_agrees_with_the_expectation_engine(recipe, B, seed):
    """The same programs: the expectation engine (levels, kinks and closed forms read from the traced
    activations) against the joint QMC simulation, an interpreter that evaluates them as plain functions."""
    assert_engine_agrees_with_simulation(build(recipe), inputs(B, 3, seed), seed)


@pytest.mark.slow
@settings(SIMULATION_SETTINGS, max_examples=50)
@given(recipe=recipes(max_steps=3, activation_sums=True), B=st.integers(2, 3), seed=st.integers(0, 2**16))
def test_more_random_programs_with_activation_sums_simulated_limit_agrees_with_the_expectation_engine(recipe, B,
                                                                                                        seed):
    assert_engine_agrees_with_simulation(build(recipe), inputs(B, 3, seed), seed)
