// tools/check-includes: nothing to report here.
#pragma once
#include <string>
#include "src/util/error.h"
#include "sibling.h"
