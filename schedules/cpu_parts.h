// The parts of the CPU schedule (schedule_cpu, cpu_schedule.cpp), one file
// per kind of Func they schedule; internal to schedules/.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "Halide.h"
#include "schedules/conv_shape.h"
#include "schedules/parameter_adjoints.h"
#include "schedules/schedule_primitives.h"

namespace segtile::cpu {

using Halide::Expr;
using Halide::Func;
using Halide::RVar;
using Halide::Stage;
using Halide::TailStrategy;
using Halide::Var;
using Halide::VarOrRVar;
using Halide::Internal::expr_uses_var;
using schedule::constant_extent;
using schedule::conv_shaped;
using schedule::debug;
using schedule::kTail;
using schedule::nonempty;
using schedule::safe_pure_positions;
using schedule::reduction_by_extent;
using schedule::unqualified;

// cpu_loops.cpp: which Vars of an update may run in lanes or in parallel,
// and the splits that put them there.
void vectorise(Stage s, const std::string &vec, int width);
std::string pure_rvar_at_0(const Stage &s, const std::vector<Expr> &lhs);
std::string parallelise(Stage s, const std::vector<std::string> &par);
std::string reduction_rvar(const Stage &s, const std::vector<Expr> &lhs, bool &constant);
std::string parallel_blocks(Stage s, const Func &f, std::vector<std::string> par);

// cpu_reductions.cpp: image-wide reductions and autodiff's scatters.
Func rfactor_reduction(Func f, int k, const std::string &r, int width);
bool schedule_scatter(Func f, int k, const std::vector<Expr> &lhs, int width);

// cpu_conv.cpp: register-blocked convolutions.
bool has_32_vector_registers(const Halide::Target &t);
// Where a conv's producers computed per band of its rows go: the block
// wrapper and its outer parallel loop.
struct ConvBand {
    Func block;
    std::string loop;
};
ConvBand schedule_conv(Func f, const Halide::Target &target, bool band_producers);

// cpu_weight_grad.cpp: conv weight gradients.
bool weight_grad_shaped(Func f);
void schedule_weight_grad(Func f, const Halide::Target &target, const std::vector<int> &extents);

// cpu_inlining.cpp: who calls whom, and what is computed inline or per band.
// Who calls whom: per Func, the number of call sites in every definition
// of every Func, and whether all of them are in pure Funcs (no updates).
struct Callers {
    int sites = 0;
    bool pure_callers_only = true;
    int pointwise_update_sites = 0;  // read in an update at its own LHS point
    int coarse_sites = 0;            // read at an index divided by a constant (x / 2: upsampling)
    std::set<std::string> by;        // the callers
};
std::map<std::string, Callers> call_sites(const std::map<std::string, Halide::Internal::Function> &env);
bool inline_pointwise(Func f, bool output, const Callers &c);
bool inline_view(Func f, bool output, const std::map<std::string, Halide::Internal::Function> &env,
                 const std::map<std::string, Callers> &callers);
std::map<std::string, std::string> band_producers(const std::map<std::string, Halide::Internal::Function> &env,
                                                  const std::map<std::string, Callers> &callers,
                                                  const std::set<std::string> &outputs);

// cpu_parameters.cpp: parameter-shaped Funcs.
std::map<std::string, std::vector<int>> parameter_shapes(const std::map<std::string, Halide::Internal::Function> &env);
void schedule_parameter(Func f, int width, const std::vector<int> &extents);

}  // namespace segtile::cpu
