"""netsor.predict against Neural Tangents' predict module and exact identities."""

from pathlib import Path

import numpy as np
import pytest

import netsor
from netsor import predict

NT = np.load(Path(__file__).parent / "data" / "nt_reference_predict.npz")
T = [None if np.isinf(t) else float(t) for t in NT["t"]]


def test_gp_equals_neural_tangents_gp_inference():
    out = predict.gp(NT["nngp_tt"], NT["nngp_st"], NT["y"], noise=1e-3, k_test_test=NT["nngp_ss"])
    assert np.allclose(out.mean, NT["gp_mean"], rtol=1e-10, atol=1e-12)
    assert np.allclose(out.covariance, NT["gp_cov"], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("i", range(len(T)))
def test_gradient_descent_mse_equals_neural_tangents(i):
    """Mean (predict.gradient_descent_mse) and ensemble covariance (…_ensemble) at t = T[i]."""
    mean = predict.gradient_descent_mse(NT["ntk_tt"], NT["y"], NT["ntk_st"], learning_rate=0.5, t=T[i]).mean
    assert np.allclose(mean, NT[f"gd_mean_{i}"], rtol=1e-9, atol=1e-11)
    ens = predict.gradient_descent_mse(NT["ntk_tt"], NT["y"], NT["ntk_st"], learning_rate=0.5, t=T[i],
                                       nngp_train_train=NT["nngp_tt"], nngp_test_train=NT["nngp_st"],
                                       nngp_test_test=NT["nngp_ss"])
    assert np.allclose(ens.mean, NT[f"ens_mean_{i}"], rtol=1e-9, atol=1e-11)
    assert np.allclose(ens.covariance, NT[f"ens_cov_{i}"], rtol=1e-9, atol=1e-11)


def test_a_training_curve_is_the_stack_of_its_times():
    """``t`` an array of the finite reference times: every slice equals Neural Tangents' prediction at
    that time (mean and ensemble covariance); an empty array, a negative or NaN time is refused."""
    times = np.array([t for t in T if t is not None])
    ens = predict.gradient_descent_mse(NT["ntk_tt"], NT["y"], NT["ntk_st"], learning_rate=0.5, t=times,
                                       nngp_train_train=NT["nngp_tt"], nngp_test_train=NT["nngp_st"],
                                       nngp_test_test=NT["nngp_ss"])
    finite = [i for i, t in enumerate(T) if t is not None]
    assert ens.mean.shape[0] == ens.covariance.shape[0] == len(finite)
    for k, i in enumerate(finite):
        assert np.allclose(ens.mean[k], NT[f"ens_mean_{i}"], rtol=1e-9, atol=1e-11)
        assert np.allclose(ens.covariance[k], NT[f"ens_cov_{i}"], rtol=1e-9, atol=1e-11)
    for bad in (np.array([]), np.array([1.0, -1.0]), np.array([np.nan])):
        with pytest.raises(netsor.NetsorError, match="t"):
            predict.gradient_descent_mse(NT["ntk_tt"], NT["y"], NT["ntk_st"], t=bad)


def test_exact_identities_on_the_training_set():
    """Noiseless GP and fully trained networks interpolate the training targets with zero variance."""
    X = np.random.default_rng(8).standard_normal((6, 3))
    k = netsor.kernel(netsor.zoo.mlp(2, "erf", 1.3, 0.2), X)
    y = np.random.default_rng(9).standard_normal(6)
    g = predict.gp(k.nngp, k.nngp, y, k_test_test=k.nngp)
    assert np.allclose(g.mean, y, atol=1e-9) and np.allclose(g.covariance, 0, atol=1e-9)
    gd = predict.gradient_descent_mse(k.ntk, y, k.ntk, nngp_train_train=k.nngp, nngp_test_train=k.nngp,
                                      nngp_test_test=k.nngp)
    assert np.allclose(gd.mean, y, atol=1e-9) and np.allclose(gd.covariance, 0, atol=1e-9)
    at_zero = predict.gradient_descent_mse(k.ntk, y, k.ntk, t=0.0, nngp_train_train=k.nngp,
                                           nngp_test_train=k.nngp, nngp_test_test=k.nngp)
    assert np.all(at_zero.mean == 0) and np.allclose(at_zero.covariance, k.nngp, rtol=0, atol=1e-14)


def test_bad_input_says_what_to_change():
    K = np.ones((3, 3))  # rank one: singular without noise
    with pytest.raises(netsor.NumericalError, match="noise"):
        predict.gp(K, K, np.arange(3.0))
    nearly = np.eye(3) + 1e-15 * np.ones((3, 3))
    nearly[0, 1] = nearly[1, 0] = 1 - 1e-15
    nearly[0, 0] = nearly[1, 1] = 1.0
    with pytest.raises(netsor.NumericalError, match="noise"):
        predict.gp(nearly, nearly, np.arange(3.0))
    assert predict.gp(K, K, np.arange(3.0), noise=1e-2).mean.shape == (3,)
    with pytest.raises(netsor.InputError, match="shape"):
        predict.gp(np.eye(3), np.eye(2), np.arange(3.0))
    with pytest.raises(netsor.InputError, match="NaN"):
        predict.gp(np.eye(3), np.full((1, 3), np.nan), np.arange(3.0))
    with pytest.raises(netsor.NetsorError, match="learning_rate"):
        predict.gradient_descent_mse(np.eye(2), np.ones(2), np.eye(2), learning_rate=0.0)
    with pytest.raises(netsor.NumericalError, match="singular"):
        predict.gradient_descent_mse(K, np.arange(3.0), K)
    with pytest.raises(netsor.InputError, match="all three"):
        predict.gradient_descent_mse(np.eye(2), np.ones(2), np.eye(2), nngp_train_train=np.eye(2))


def test_infinite_time_is_the_end_of_training_and_mismatched_targets_are_named() -> None:
    """``t=np.inf`` (alone or in a training curve) is ``t=None``; y_train of the wrong length is
    reported as such (the message used to ask for a kernel of y_train's size, blaming the kernel)."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((5, 5))
    K, y, Kt = A @ A.T + np.eye(5), rng.standard_normal(5), rng.standard_normal((3, 5))
    end = netsor.predict.gradient_descent_mse(K, y, Kt).mean
    assert np.array_equal(netsor.predict.gradient_descent_mse(K, y, Kt, t=np.inf).mean, end)
    curve = netsor.predict.gradient_descent_mse(K, y, Kt, t=np.array([0.0, np.inf])).mean
    assert np.array_equal(curve[1], end) and np.all(curve[0] == 0.0)
    with pytest.raises(netsor.InputError, match="y_train has 4 rows"):
        netsor.predict.gp(K, Kt, y[:4])


def test_a_matrix_that_is_not_psd_is_named_with_the_noise_that_fixes_it():
    """A training kernel with a negative eigenvalue (not a Gram matrix: user error) is named with its
    smallest eigenvalue and a noise that makes the system well posed (the suggestion used to be
    1e-10 of the diagonal whatever the eigenvalue); the suggested noise works."""
    import re

    K = np.diag([2.0, 1.0, -0.5])
    with pytest.raises(netsor.NumericalError, match=r"smallest eigenvalue -0\.5") as info:
        predict.gp(K, np.ones((2, 3)), np.ones(3))
    noise = float(re.search(r"noise=([0-9.e+-]+)", str(info.value)).group(1))
    assert noise > 0.5
    assert np.all(np.isfinite(predict.gp(K, np.ones((2, 3)), np.ones(3), noise=noise).mean))


def _setup():
    """The reports' setup: the NNGP of a depth-2 MLP on 5 points; test inputs = the first 2 training inputs."""
    X = np.random.default_rng(0).standard_normal((5, 3))
    K = netsor.nngp(netsor.zoo.mlp(2), X)
    return K, K[:2]


def test_values_near_float64s_limits_are_scaled_not_turned_into_nan():
    """Targets near 1e308 (the mean used to be NaN): a noiseless GP interpolates its training targets, so at
    the training inputs the mean is y itself. An NTK of 1e308·I with Θ_*x = 1e308·(1, 1) and y = (1, 1) ends
    training at Θ_*x Θ⁻¹ y = 2 (was NaN). A mean whose true value is beyond float64 raises."""
    K, Ks = _setup()
    assert np.allclose(predict.gp(K, Ks, np.full(5, 1e308)).mean, 1e308, rtol=1e-8, atol=0)
    out = predict.gradient_descent_mse(np.eye(2) * 1e308, [1.0, 1.0], np.ones((1, 2)) * 1e308)
    assert out.mean == pytest.approx([2.0], rel=1e-14)
    tiny = predict.gp(np.eye(2) * 1e-310, np.ones((1, 2)) * 1e-310, [1.0, 2.0]).mean  # subnormal kernel
    assert tiny == pytest.approx([3.0], rel=1e-12)
    with pytest.raises(netsor.NumericalError, match="float64's range"):
        predict.gp(np.array([[1.0, 0.9], [0.9, 1.0]]), np.array([[1.0, -1.0]]), [1e308, -1e308])


def test_a_training_time_beyond_float64_is_the_end_of_training():
    """η·t = 1e308·1e308 overflows (was inf·0 = NaN on the null space of a singular NTK): it is t → ∞, refused
    for a singular NTK like t=None; t = 10**400 (an int float() cannot hold: was OverflowError) on a positive
    definite NTK is the end of training, Θ_*x Θ⁻¹ y."""
    with pytest.raises(netsor.NumericalError, match="singular"):
        predict.gradient_descent_mse(np.ones((2, 2)), [1.0, 1.0], np.ones((1, 2)), learning_rate=1e308, t=1e308)
    with pytest.raises(netsor.NumericalError, match="singular"):
        predict.gradient_descent_mse(np.ones((2, 2)), [1.0, 1.0], np.ones((1, 2)), t=10**400)
    rng = np.random.default_rng(1)
    A = rng.standard_normal((4, 4))
    theta, y, theta_star = A @ A.T + np.eye(4), rng.standard_normal(4), rng.standard_normal((2, 4))
    end = np.linalg.solve(theta, y) @ theta_star.T
    assert np.allclose(predict.gradient_descent_mse(theta, y, theta_star, t=10**400).mean, end, rtol=1e-12)
    curve = predict.gradient_descent_mse(theta, y, theta_star, t=[0, 10**400]).mean
    assert np.all(curve[0] == 0.0) and np.allclose(curve[1], end, rtol=1e-12)
    with pytest.raises(netsor.HyperParameterError, match=">= 0"):
        predict.gradient_descent_mse(theta, y, theta_star, t=-10**400)
    with pytest.raises(netsor.HyperParameterError, match="real number"):
        predict.gradient_descent_mse(theta, y, theta_star, t=True)


def test_a_singular_ntk_trained_long_enough_to_amplify_rounding_is_refused():
    """Θ = ones((3, 3)) (λ = 3, 0, 0): at t = 1 the weight on the null space is t/m = 1/3 and the mean is
    (1 − e^{−λt/m}) Θ_*x v vᵀ y / λ for v = (1, 1, 1)/√3, i.e. (1 − e^{−1})·(y₁ + y₂ + y₃)/3; at t = 1e14
    rounding would be amplified λ_max·t/m = 1e14-fold, beyond 1/RCOND_MIN, and it is refused."""
    y = np.array([1.0, 2.0, 3.0])
    mean = predict.gradient_descent_mse(np.ones((3, 3)), y, np.ones((1, 3)), t=1.0).mean
    assert mean == pytest.approx([(1 - np.exp(-1.0)) * 2.0], rel=1e-12)
    with pytest.raises(netsor.NumericalError, match="singular.*t below about 1e\\+13"):
        predict.gradient_descent_mse(np.ones((3, 3)), y, np.ones((1, 3)), t=1e14)


@pytest.mark.parametrize("call", [
    lambda K, Ks: predict.gp(K, Ks, np.ones(5) + 1j),
    lambda K, Ks: predict.gp(np.eye(2) + 1j, np.ones((1, 2)), np.ones(2)),
    lambda K, Ks: predict.gp(K, Ks + 0j, np.ones(5)),
    lambda K, Ks: predict.gp(K, Ks, ["a"] * 5),
    lambda K, Ks: predict.gp(K, Ks, [True] * 5),
    lambda K, Ks: predict.gradient_descent_mse(np.eye(2), ["a", "b"], np.ones((1, 2))),
    lambda K, Ks: predict.gradient_descent_mse(np.eye(2) + 1j, [1.0, 2.0], np.ones((1, 2))),
])
def test_complex_string_and_boolean_inputs_are_refused(call):
    """They used to be cast with a ComplexWarning (imaginary parts dropped) or raise a raw ValueError."""
    K, Ks = _setup()
    with pytest.raises(netsor.InputError, match="must hold real numbers"):
        call(K, Ks)


def test_test_kernels_that_are_not_psd_or_not_symmetric_are_refused():
    """k_test_test = −I gave a negative posterior variance; a non-symmetric one was accepted. The same for the
    NNGP kernels of the ensemble covariance. A consistent kernel (test = training inputs) passes with
    posterior variance 0 up to rounding."""
    K, Ks = _setup()
    with pytest.raises(netsor.NumericalError, match="not jointly positive semi-definite"):
        predict.gp(K, Ks, np.ones(5), k_test_test=-np.eye(2))
    with pytest.raises(netsor.InputError, match="k_test_test must be symmetric"):
        predict.gp(K, Ks, np.ones(5), k_test_test=K[:2, :2] + np.array([[0.0, 0.1], [0.0, 0.0]]))
    assert np.allclose(predict.gp(K, Ks, np.ones(5), k_test_test=K[:2, :2]).covariance, 0.0, atol=1e-9)
    with pytest.raises(netsor.NumericalError, match="nngp_test_test.*not jointly positive semi-definite"):
        predict.gradient_descent_mse(np.eye(2), [1.0, 2.0], np.ones((1, 2)), nngp_train_train=np.eye(2),
                                     nngp_test_train=np.ones((1, 2)), nngp_test_test=-np.eye(1))
    with pytest.raises(netsor.InputError, match="nngp_test_test must be symmetric"):
        predict.gradient_descent_mse(np.eye(2), [1.0, 2.0], np.ones((2, 2)), nngp_train_train=np.eye(2),
                                     nngp_test_train=np.ones((2, 2)), nngp_test_test=np.array([[2.0, 1.0],
                                                                                              [0.0, 2.0]]))


def test_empty_targets_are_refused():
    """y_train of shape (5, 0) used to raise ZeroDivisionError (a learning rate per target of 1/0)."""
    K, Ks = _setup()
    for call in (lambda: predict.gradient_descent_mse(K, np.zeros((5, 0)), Ks, t=1.0),
                 lambda: predict.gp(K, Ks, np.zeros((5, 0)))):
        with pytest.raises(netsor.InputError, match="no output columns"):
            call()
