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
