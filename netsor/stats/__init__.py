"""Statistics of convergence: distances to the limit, rates, sweeps."""
