"""A multi-layer perceptron trainer on NumPy (the reference), CuPy + autogemm, and MPI ranks."""
