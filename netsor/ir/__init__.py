"""The Netsor IR: variables, lines, expressions, programs, printing and transforms."""

from netsor.ir.lines import BiasLine, DataLine, LinCombLine, Line, MatMulLine, MomentLine, NonLinLine
from netsor.ir.program import Program, Readout
from netsor.ir.variables import Dim, Matrix, TransposedMatrix, Vector

__all__ = ["BiasLine", "DataLine", "Dim", "Line", "LinCombLine", "MatMulLine", "Matrix", "MomentLine", "NonLinLine",
           "Program", "Readout", "TransposedMatrix", "Vector"]
