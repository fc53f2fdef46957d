// gemm_wgmma.cu.j2's warp-specialized pipeline (PRODUCER), the body of its kernel's branch: a
// producer warpgroup fills the slots, the computing warpgroups multiply, handing slots over through mbarriers.
        // full[s]: slot s landed and prepared (an arrival per producer thread; under TMA without a
        // prepare step, the copying thread's with the bytes); empty[s]: the wgmmas that read it are
        // done (an arrival per computing warp of this block and of the others in its cluster row and
        // column); copied[s] (read under TMA with a prepare step alone): its copies landed. Slot s's
        // n-th use is phase n of each. turn[w] (PERSISTENT): warpgroup w's turn to multiply, its
        // n-th phase handed on by warpgroup w - 1 after its n-th tile (warpgroup 0's by the last one).
        unsigned long long* full = reinterpret_cast<unsigned long long*>(prepared + PREP_BUFFERS * PREPARED);
        unsigned long long* empty = full + STAGES;
        unsigned long long* copied = empty + STAGES;
        unsigned long long* turn = copied + STAGES;
        if (tid == 0)
            for (int s = 0; s < STAGES; ++s) {
                mbarrier_init(full + s, TMA && PREPARED == 0 ? 1 : LOADERS);
                mbarrier_init(empty + s, 4 * (PERSISTENT ? 1 : WARPGROUPS) * (CM + CN - 1));
                mbarrier_init(copied + s, 1);
            }
        if (tid == 0 && PERSISTENT)
            for (int w = 0; w < WARPGROUPS; ++w) mbarrier_init(turn + w, 4);
        if (tid == 0) fence_mbarrier_init();
        if constexpr (CLUSTERED) cluster_sync();   // no block copies into another before its mbarriers are set
        else __syncthreads();
        if (wg == WARPGROUPS) {      // the producer: slot g % STAGES is free once stage g - STAGES is done
            auto claim = [&](int g) {
                if (g >= STAGES) mbarrier_wait(empty + g % STAGES, (g / STAGES - 1) & 1);
            };
            auto claim_and_load = [&](int g) {
                claim(g);
                load_stage(g, t);
            };
            if constexpr (TMA && PREPARED == 0) {
                if (t == 0)
                    for (int g = 0; g < stages_total; ++g) {
                        claim(g);
                        copy_stage(g, full + g % STAGES);
                    }
            } else if constexpr (TMA) {   // stage g is copied while stage g - LAG is prepared
                for (int g = 0; g < stages_total + LAG; ++g) {
                    if (t == 0 && g < stages_total) {
                        claim(g);
                        copy_stage(g, copied + g % STAGES);
                    }
                    if (g >= LAG) {
                        mbarrier_wait(copied + (g - LAG) % STAGES, ((g - LAG) / STAGES) & 1);
                        prepare_stage(g - LAG, t);
                        mbarrier_arrive(full + (g - LAG) % STAGES);
                    }
                }
            } else if constexpr (PREPARED == 0) {
                for (int g = 0; g < stages_total; ++g) {
                    claim_and_load(g);
                    cp_async_arrive(full + g % STAGES);
                }
            } else {                 // stage g lands while stage g - LAG is prepared
                for (int g = 0; g < stages_total + LAG; ++g) {
                    if (g < stages_total) claim_and_load(g);
                    cp_async_commit();
                    if (g >= LAG) {
                        cp_async_wait<LAG>();
                        named_barrier<1, LOADERS>();
                        prepare_stage(g - LAG, t);
                        mbarrier_arrive(full + (g - LAG) % STAGES);
                    }
                }
            }
            if constexpr (CLUSTERED) cluster_sync();   // with the computing threads' below
            return;
        }
        // The warp is done with slot s: one arrival for its lanes at each block that copies into it.
        auto release = [&](int s) {
            __syncwarp();
            if (t % 32 != 0) return;
            mbarrier_arrive(empty + s);
            for (int x = 0; x < CN; ++x)
                if (x != cx) mbarrier_arrive_cluster(empty + s, x + cy * CN);
            for (int y = 0; y < CM; ++y)
                if (y != cy) mbarrier_arrive_cluster(empty + s, cx + y * CN);
        };
        // The block's tile, or under PERSISTENT this warpgroup's turns: tiles wg, wg + WARPGROUPS, ...
        constexpr bool TURNS = PERSISTENT && WARPGROUPS > 1;
        for (int i = PERSISTENT ? wg : 0; i < block_tiles; i += PERSISTENT ? WARPGROUPS : 1) {
            zero_accumulators();
            if (TURNS && i > 0) mbarrier_wait(turn + wg, (i / WARPGROUPS - (wg == 0)) & 1);
            for (int kt = 0; kt < k_tiles; ++kt) {
                const int g = i * k_tiles + kt;
                mbarrier_wait(full + g % STAGES, (g / STAGES) & 1);
                fence_async_proxy();
                multiply(g);
                wgmma_wait<INFLIGHT>();
{% if math == "3xtf32" %}
                add_parts();   // INFLIGHT is 0: this stage's wgmmas are done
{% endif %}
                if (kt >= INFLIGHT) release((g - INFLIGHT) % STAGES);
            }
            if constexpr (TURNS) {   // every stage of this tile waited on: the next warpgroup's turn
                __syncwarp();
                if (t % 32 == 0) mbarrier_arrive(turn + (wg + 1) % WARPGROUPS);
            }
            wgmma_wait<0>();
            if constexpr (PERSISTENT)    // the stages whose wgmmas were still in flight, for the next tiles
                for (int kt = max(0, k_tiles - INFLIGHT); kt < k_tiles; ++kt) release((i * k_tiles + kt) % STAGES);
            finish_tile(tile_m0(i), tile_n0(i));
        }
        // No block leaves while others may still copy into it or arrive on its mbarriers.
        if constexpr (CLUSTERED) cluster_sync();
