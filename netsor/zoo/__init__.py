"""Architectures as Netsor programs. Each function returns a :class:`netsor.Program`."""

from netsor.zoo.cnn import cnn
from netsor.zoo.layernorm_mlp import layernorm_mlp
from netsor.zoo.mlp import mlp
from netsor.zoo.resnet import resnet
from netsor.zoo.rnn import rnn
from netsor.zoo.transformer import transformer

#: Architectures by name, for the command line.
ARCHITECTURES = {"cnn": cnn, "mlp": mlp, "resnet": resnet, "rnn": rnn, "layernorm_mlp": layernorm_mlp,
                 "transformer": transformer}

__all__ = ["ARCHITECTURES", "cnn", "layernorm_mlp", "mlp", "resnet", "rnn", "transformer"]
