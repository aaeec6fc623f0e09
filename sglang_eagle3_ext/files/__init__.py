"""Files this package writes: `outdir` is the one rule for output directories."""
