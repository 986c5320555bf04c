"""Architectures as Netsor programs. Each function returns a :class:`netsor.Program`."""

from netsor.zoo.mlp import mlp
from netsor.zoo.resnet import resnet
from netsor.zoo.rnn import rnn

#: Architectures by name, for the command line.
ARCHITECTURES = {"mlp": mlp, "resnet": resnet, "rnn": rnn}

__all__ = ["ARCHITECTURES", "mlp", "resnet", "rnn"]
