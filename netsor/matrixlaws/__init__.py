"""Neural matrix laws: spectral laws, free probability, Jacobian spectra of deep MLPs."""

from netsor.matrixlaws.empirical import empirical_jacobian_spectrum, haar_orthogonal, moment_table
from netsor.matrixlaws.esd import EmpiricalSpectrum, esd, ks_distance, w1_distance
from netsor.matrixlaws.fip import FIPReport, classical_prediction, fip_check
from netsor.matrixlaws.free import (
    Factor,
    FreeProductLaw,
    FreeSumLaw,
    cauchy_transform,
    free_additive_convolution,
    free_multiplicative_convolution,
    r_transform,
    s_transform,
    stieltjes_inversion,
)
from netsor.matrixlaws.jacobian import (
    JacobianLaw,
    derivative_law,
    fixed_point,
    jacobian_spectrum,
    variance_map,
)
from netsor.matrixlaws.laws import (
    DensityLaw,
    DiscreteLaw,
    FussCatalan,
    MarchenkoPastur,
    QuadratureLaw,
    Semicircle,
    SpectralLaw,
)
from netsor.matrixlaws.series import (
    free_cumulants,
    moments_from_free_cumulants,
    moments_from_s,
    s_from_moments,
)

__all__ = [
    "DensityLaw", "DiscreteLaw", "EmpiricalSpectrum", "FIPReport", "Factor", "FreeProductLaw",
    "FreeSumLaw", "FussCatalan", "JacobianLaw", "MarchenkoPastur", "QuadratureLaw", "Semicircle",
    "SpectralLaw", "cauchy_transform", "classical_prediction", "derivative_law",
    "empirical_jacobian_spectrum", "esd", "fip_check", "fixed_point",
    "free_additive_convolution", "free_cumulants", "free_multiplicative_convolution",
    "haar_orthogonal", "jacobian_spectrum", "ks_distance", "moment_table",
    "moments_from_free_cumulants", "moments_from_s", "r_transform", "s_from_moments",
    "s_transform", "stieltjes_inversion", "variance_map", "w1_distance",
]
