// Logits post-processing and sampling on the device, for rows of logits that
// stay in VRAM (the draft's level passes, the target's verify pass). Pointers
// are device memory; `stream` is a cudaStream_t (the backend's Backend::stream()).
// The laws are those of the CPU sampler (src/engine/sampler.h): temperature,
// then top-k, then top-p, ties broken towards the lower token id. Random draws
// come from math::counter_uniform(seed, row * V + token) so the host can
// reproduce any device draw exactly.
#pragma once
#include <cstdint>

namespace redwood::cuda {

// probs[r] = softmax(logits[r] / temperature) (temperature > 0).
void softmax_rows(void* stream, const float* logits, int rows, int vocab, float temperature, float* probs);
// ids[r] = argmax logits[r] (lowest id on ties).
void argmax_rows(void* stream, const float* logits, int rows, int vocab, int32_t* ids);
// In place on normalised rows: keep the top_k (0 = all) most probable tokens,
// then the shortest prefix of them reaching top_p mass; renormalise.
void top_k_top_p_rows(void* stream, float* probs, int rows, int vocab, int top_k, float top_p);
// ids[r] = the token whose cumulative mass (in id order, zeros skipped) first
// exceeds u_r = counter_uniform(seed, r).
void sample_rows(void* stream, const float* probs, int rows, int vocab, uint64_t seed, int32_t* ids);
// ids[r * k .. r * k + k) = k draws WITHOUT replacement from probs[r], in draw
// order (Gumbel top-k with u = counter_uniform(seed, r * vocab + token)); k <= 64.
void gumbel_top_k_rows(void* stream, const float* probs, int rows, int vocab, int k, uint64_t seed, int32_t* ids);

}  // namespace redwood::cuda
