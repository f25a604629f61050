// Negative control for tools/check-includes: offload and spec are on one level
// and do not know each other (line 4); engine is below offload.
#include "offload/plan.h"
#include "src/spec/verify.h"
#include "src/engine/weights.h"
#include <vector>
