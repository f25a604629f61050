// The KV cache element types a run chooses by name (--kv-type; kv_type in jobs
// and suites), apart from the cache itself (kv_cache.h): config readers check
// the name without the backend. Defined in kv_cache.cpp.
#pragma once
#include <string>

#include "kernels/common/dtype.h"

namespace redwood {

inline constexpr const char* kKvTypeNames[] = {"f32", "f16", "bf16"};
// The type a name in kKvTypeNames stands for; anything else is a one-line
// redwood::Error naming `what` if not null ("--kv-type: expected f32 | f16 | bf16, got 'x'").
DType kv_type_from_name(const std::string& name, const char* what = "--kv-type");
// kKvTypeNames joined by `sep` ("f32 | f16 | bf16"), for messages and help.
std::string kv_type_list(const char* sep);

}  // namespace redwood
