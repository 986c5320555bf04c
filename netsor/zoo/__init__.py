"""Architectures as Netsor programs. Each function returns a :class:`netsor.Program`."""

from netsor.zoo.cnn import cnn
from netsor.zoo.mlp import mlp
from netsor.zoo.resnet import resnet
from netsor.zoo.rnn import rnn

#: Architectures by name, for the command line.
ARCHITECTURES = {"cnn": cnn, "mlp": mlp, "resnet": resnet, "rnn": rnn}

__all__ = ["ARCHITECTURES", "cnn", "mlp", "resnet", "rnn"]
