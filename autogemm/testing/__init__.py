"""Testing kernels without a GPU: `emulator` runs rendered kernels on the CPU (cuda_emu.h, built
with g++), as autogemm's own tests run every built-in family against float64, and as a plugin
family's tests run its own."""
