"""Architectures as Netsor programs. Each function returns a :class:`netsor.Program`."""

from netsor.zoo.matrix_laws import marchenko_pastur_moments, semicircle_moments
from netsor.zoo.mlp import mlp
from netsor.zoo.resnet import resnet
from netsor.zoo.rnn import rnn

#: Architectures by name, for the command line.
ARCHITECTURES = {"mlp": mlp, "resnet": resnet, "rnn": rnn}
#: Random-matrix laws as data-free Netsor⊤ programs, by name (their NNGP kernel is the Hankel
#: matrix of the law's moments).
MATRIX_LAWS = {"semicircle": semicircle_moments, "marchenko-pastur": marchenko_pastur_moments}

__all__ = ["ARCHITECTURES", "MATRIX_LAWS", "marchenko_pastur_moments", "mlp", "resnet", "rnn", "semicircle_moments"]
