// Tree-masked grouped-query attention on the CPU (see AttentionArgs).
#pragma once
#include "kernels/backend.h"

namespace redwood::cpu {
void attention(const AttentionArgs& a);
// Reference: dense mask built from parents, double precision, single thread (tests).
// Assumes an empty pending block (the n new tokens are the whole block).
void attention_reference(const AttentionArgs& a);
}  // namespace redwood::cpu
