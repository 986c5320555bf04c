"""Architectures as Netsor programs. Each function returns a :class:`netsor.Program`."""

from netsor.zoo.batchnorm_mlp import batchnorm_mlp
from netsor.zoo.cnn import cnn
from netsor.zoo.gru import gru
from netsor.zoo.matrix_laws import jacobian_moments, marchenko_pastur_moments, semicircle_moments
from netsor.zoo.mlp import layernorm_mlp, mlp
from netsor.zoo.resnet import resnet
from netsor.zoo.rnn import rnn
from netsor.zoo.transformer import transformer

#: Architectures by name, for the command line.
ARCHITECTURES = {"cnn": cnn, "gru": gru, "mlp": mlp, "resnet": resnet, "rnn": rnn, "layernorm_mlp": layernorm_mlp,
                 "transformer": transformer, "batchnorm_mlp": batchnorm_mlp}
#: Random-matrix laws as data-free Netsor⊤ programs, by name (their NNGP kernel is the Hankel
#: matrix of the law's moments).
MATRIX_LAWS = {"semicircle": semicircle_moments, "marchenko-pastur": marchenko_pastur_moments}

__all__ = ["ARCHITECTURES", "MATRIX_LAWS", "batchnorm_mlp", "cnn", "gru", "jacobian_moments", "layernorm_mlp",
           "marchenko_pastur_moments",
           "mlp", "resnet", "rnn", "semicircle_moments", "transformer"]
