// Negative control for tools/check-includes: offload and speculative are on one level
// and do not know each other (line 4); engine is below offload.
#include "offload/placement.h"
#include "src/speculative/verify.h"
#include "src/engine/weights.h"
#include <vector>
