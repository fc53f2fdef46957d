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
{% if math == "3xtf32" and not inflight %}
            add_parts();   // INFLIGHT is 0: this stage's wgmmas are done
{% elif math == "3xtf32" %}
            if (kt >= 1) add_parts_of(kt - 1);   // stage kt - 1's wgmmas are done
{% endif %}
            __syncthreads();         // stage kt + 1 is ready; every warpgroup is done with stage kt - INFLIGHT
        }
        wgmma_wait<0>();
{% if math == "3xtf32" and inflight %}
        if (k_tiles > 0) add_parts_of(k_tiles - 1);
{% endif %}
        finish_tile(tile_m0(0), tile_n0(0));
