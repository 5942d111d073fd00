// A model's parameters and optimizer state as safetensors files.
//
// Weights: one tensor per ParamSpec, named with PyTorch's state_dict names
// ("features.0.weight") and stored with PyTorch's shapes: a segtile conv
// weight (kx, ky, c_in, c_out) is the OIHW tensor [c_out, c_in, ky, kx], a
// dense weight (in, out) is [out, in], biases and batch-norm vectors are [C].
// Each batch norm also gets "<prefix>.num_batches_tracked" (I64 scalar, 0),
// as torch.nn.BatchNorm2d has it, so that PyTorch's strict load_state_dict
// accepts the file: model.load_state_dict(safetensors.torch.load_file(path)).
//
// Optimizer state (for resuming a run): per trainable parameter
//   sgd:  "optimizer.sgd.momentum_buffer.<name>"
//   adam: "optimizer.adam.exp_avg.<name>", "optimizer.adam.exp_avg_sq.<name>"
// with the parameter's shape, and metadata "optimizer.kind", "optimizer.step"
// (and the hyper-parameters, for the record).
#pragma once

#include <map>
#include <string>

#include "io/safetensors.h"
#include "runtime/optimizer.h"
#include "runtime/parameters.h"

namespace segtile {

// Writes params.values (float32 or float64, as the store holds them)
// atomically. `metadata` is added to the header ("format": "pt" always is).
void save_parameters(const std::string &path, const ParamStore &params,
                     const std::map<std::string, std::string> &metadata = {});

// Reads every value of `params` from `path`, converting F32/F64 to the
// store's type. Checks the whole file before changing anything: a missing,
// unexpected, wrongly shaped or wrongly typed tensor, or a truncated or
// corrupt file, throws WeightFileError naming the file and the tensor, and
// leaves `params` unchanged. Returns the file's metadata.
std::map<std::string, std::string> load_parameters(const std::string &path, ParamStore &params);

// Writes the optimizer's state tensors and step count atomically.
void save_optimizer_state(const std::string &path, const Optimizer &opt, const ParamStore &params,
                          const std::map<std::string, std::string> &metadata = {});

// Restores state tensors and step count into `opt` (built with the same
// kind for the same model); throws WeightFileError (other optimizer kind,
// missing or mismatched tensor, corrupt file) leaving `opt` unchanged.
// Returns the file's metadata.
std::map<std::string, std::string> load_optimizer_state(const std::string &path, Optimizer &opt,
                                                        const ParamStore &params);

}  // namespace segtile
