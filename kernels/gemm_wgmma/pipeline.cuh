// gemm_wgmma.cu.j2's pipeline without a producer, the body of its kernel's branch: every thread
// copies and prepares the next stages while this one's wgmmas run; the block synchronizes once a k-tile.
        zero_accumulators();
        // Stage kt once it has landed (every thread's copies), prepared. Stage kt + 1 is prepared
        // while stage kt's wgmmas run.
        auto land_and_prepare = [&](int kt) {
            cp_async_wait<AHEAD - 1>();
            fence_async_proxy();
            __syncthreads();
            if constexpr (PREPARED > 0) prepare_stage(kt, tid);
        };
#pragma unroll
        for (int s = 0; s < AHEAD; ++s) {
            if (s < k_tiles) load_stage(s, tid);
            cp_async_commit();
        }
        land_and_prepare(0);
        __syncthreads();
        for (int kt = 0; kt < k_tiles; ++kt) {
            // Stage kt is ready in every warpgroup's view; the wgmmas of stage kt - 1 - INFLIGHT are
            // done, so its slot, (kt + AHEAD) % STAGES, and its prepared buffer are free.
            if (kt + AHEAD < k_tiles) load_stage(kt + AHEAD, tid);
            cp_async_commit();
            multiply(kt);
            if (kt + 1 < k_tiles) land_and_prepare(kt + 1);
            wgmma_wait<INFLIGHT>();
{% if math == "3xtf32" %}
            add_parts();   // INFLIGHT is 0: this stage's wgmmas are done
{% endif %}
            __syncthreads();         // stage kt + 1 is ready; every warpgroup is done with stage kt - INFLIGHT
        }
        wgmma_wait<0>();
        finish_tile(tile_m0(0), tile_n0(0));
