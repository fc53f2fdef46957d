// out = x^T for a rows x cols float matrix, through a TILE x TILE tile of shared memory (a padded
// row, so that the column reads do not conflict); a block of TILE x ROWS threads, each moving
// TILE / ROWS elements. TILE and ROWS are not defined here: autogemm.tune_kernel defines each
// config's values, as -DTILE=32 -DROWS=8 would.
extern "C" __global__ void transpose(const float* __restrict__ x, float* __restrict__ out, int rows, int cols)
{
    __shared__ float tile[TILE][TILE + 1];
    const int col = blockIdx.x * TILE + threadIdx.x;
    for (int r = threadIdx.y; r < TILE; r += ROWS) {
        const int row = blockIdx.y * TILE + r;
        if (row < rows && col < cols) tile[r][threadIdx.x] = x[(size_t)row * cols + col];
    }
    __syncthreads();
    const int out_col = blockIdx.y * TILE + threadIdx.x;     // out is cols x rows
    for (int r = threadIdx.y; r < TILE; r += ROWS) {
        const int out_row = blockIdx.x * TILE + r;
        if (out_row < cols && out_col < rows) out[(size_t)out_row * rows + out_col] = tile[threadIdx.x][r];
    }
}
