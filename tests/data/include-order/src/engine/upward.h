// Negative control for tools/check-includes (tests/python/test_check_includes.py):
// engine is below planner, so line 5 is an offence; util is below engine.
#pragma once
#include "src/util/error.h"
#include "src/planner/cost_model.h"
#include "src/engine/weights.h"
