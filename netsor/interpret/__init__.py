"""Interpreters of Netsor programs: finite width, infinite width and coupled."""
