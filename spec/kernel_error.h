// A kernel that failed to build, lower or run: always a segtile bug, never
// the user's input (bad input is refused before any kernel is built). The
// message names the model, the segment and the kernel, then Halide's words.
// `segtile` maps it to exit status 70 and asks for a report.
#pragma once

#include "spec/errors.h"

namespace segtile {

class KernelError : public InternalError {
public:
    using InternalError::InternalError;
};

}  // namespace segtile
