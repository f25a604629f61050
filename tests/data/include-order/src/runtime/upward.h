// Negative control for tools/check-includes: the application floor (src/app/)
// is above the runtime, so line 5 is an offence; the CLI may include both.
#pragma once
#include "src/runtime/session.h"
#include "src/app/job_runner.h"
