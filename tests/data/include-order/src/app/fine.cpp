// tools/check-includes: the application floor includes the runtime below it.
#include "src/app/job_runner.h"
#include "src/runtime/session.h"
