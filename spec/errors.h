// The kinds of failure segtile reports, one type each. The program maps
// them to its exit statuses (apps/error_report.cpp, docs/program.md); a
// program that links segtile can catch segtile::Error for all of them.
// Messages name the file, option or layer and say what to change.
#pragma once

#include <stdexcept>

namespace segtile {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// An option or its value (exit 1).
class UsageError : public Error {
public:
    using Error::Error;
};

// A file or folder the user gave: CSV, image, mask, weights, plan, run folder (exit 1).
class DataError : public Error {
public:
    using Error::Error;
};

// A model file, or a model the input does not fit (exit 2).
class ModelError : public Error {
public:
    using Error::Error;
};

// No plan fits the memory cap (exit 3).
class InfeasibleError : public Error {
public:
    using Error::Error;
};

// Training turned non-finite (exit 4).
class DivergedError : public Error {
public:
    using Error::Error;
};

// A bug in segtile, Halide's failures included (exit 70).
class InternalError : public Error {
public:
    using Error::Error;
};

}  // namespace segtile
