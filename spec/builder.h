// C++ builder: the same model description as a JSON file, written in code.
//   Model m = ModelBuilder("net", 3)
//       .conv2d("conv1", 16, 3).stride(2).padding(1).params("features.0")
//       .relu("relu1")
//       .global_avg_pool("gap").flatten("flat").dense("fc", 10)
//       .loss(LossKind::SoftmaxCrossEntropy)
//       .build();
// Each layer reads the previous one unless .inputs({...}) says otherwise.
#pragma once

#include <string>
#include <vector>

#include "spec/model.h"

namespace segtile {

class ModelBuilder {
public:
    ModelBuilder(std::string name, int input_channels) {
        m_.name = std::move(name);
        m_.input_channels = input_channels;
    }

    ModelBuilder &layer(LayerKind kind, std::string name) {
        Layer l;
        l.kind = kind;
        l.name = std::move(name);
        if (kind_info(kind).stride_defaults_to_kernel) l.stride = 0;  // build() sets the kernel
        m_.layers.push_back(std::move(l));
        return *this;
    }
    ModelBuilder &conv2d(std::string name, int out_channels, int kernel) {
        layer(LayerKind::Conv2d, std::move(name));
        last().out_channels = out_channels;
        last().kernel = kernel;
        return *this;
    }
    ModelBuilder &max_pool(std::string name, int kernel) { return pool(LayerKind::MaxPool, std::move(name), kernel); }
    ModelBuilder &avg_pool(std::string name, int kernel) { return pool(LayerKind::AvgPool, std::move(name), kernel); }
    ModelBuilder &relu(std::string name) { return layer(LayerKind::Relu, std::move(name)); }
    ModelBuilder &leaky_relu(std::string name, double slope = 0.01) {
        layer(LayerKind::LeakyRelu, std::move(name));
        last().negative_slope = slope;
        return *this;
    }
    ModelBuilder &sigmoid(std::string name) { return layer(LayerKind::Sigmoid, std::move(name)); }
    ModelBuilder &batch_norm(std::string name, double eps = 1e-5) {
        layer(LayerKind::BatchNorm, std::move(name));
        last().eps = eps;
        return *this;
    }
    ModelBuilder &upsample(std::string name, int factor = 2) {
        layer(LayerKind::Upsample, std::move(name));
        last().factor = factor;
        return *this;
    }
    ModelBuilder &concat(std::string name, std::vector<std::string> inputs) {
        layer(LayerKind::Concat, std::move(name));
        last().inputs = std::move(inputs);
        return *this;
    }
    ModelBuilder &add(std::string name, std::vector<std::string> inputs) {
        layer(LayerKind::Add, std::move(name));
        last().inputs = std::move(inputs);
        return *this;
    }
    ModelBuilder &global_avg_pool(std::string name) { return layer(LayerKind::GlobalAvgPool, std::move(name)); }
    ModelBuilder &flatten(std::string name) { return layer(LayerKind::Flatten, std::move(name)); }
    ModelBuilder &dense(std::string name, int out_features) {
        layer(LayerKind::Dense, std::move(name));
        last().out_features = out_features;
        return *this;
    }

    // Modifiers of the last layer added.
    ModelBuilder &stride(int s) { return assign(last().stride, s); }
    ModelBuilder &padding(int p) { return assign(last().padding, p); }
    ModelBuilder &dilation(int d) { return assign(last().dilation, d); }
    ModelBuilder &groups(int g) { return assign(last().groups, g); }
    ModelBuilder &bias(bool b) { return assign(last().bias, b); }
    ModelBuilder &in_features(int f) { return assign(last().in_features, f); }
    ModelBuilder &params(std::string prefix) { return assign(last().param_prefix, std::move(prefix)); }
    ModelBuilder &inputs(std::vector<std::string> in) { return assign(last().inputs, std::move(in)); }
    // Any field by its JSON name, for kinds without a method of their own:
    //   .layer(LayerKind::AvgPool, "pool").set("kernel", 2)
    ModelBuilder &set(const std::string &field, double value) {
        const LayerField *f = find_layer_field(field);
        if (!f) throw ModelError("ModelBuilder: no layer field \"" + field + "\"");
        if (f->int_field) last().*f->int_field = (int)value;
        else if (f->double_field) last().*f->double_field = value;
        else last().*f->bool_field = value != 0;
        return *this;
    }

    ModelBuilder &loss(LossKind kind, std::string input = "") {
        m_.loss.kind = kind;
        m_.loss.input = std::move(input);
        return *this;
    }

    // Resolves the graph (throws ModelError like a JSON file would).
    Model build() const {
        Model m = m_;
        for (auto &l : m.layers)
            if (kind_info(l.kind).stride_defaults_to_kernel && l.stride == 0) l.stride = l.kernel;
        m.resolve();
        return m;
    }

private:
    template <typename T, typename V>
    ModelBuilder &assign(T &field, V value) {
        field = std::move(value);
        return *this;
    }
    ModelBuilder &pool(LayerKind k, std::string name, int kernel) {
        layer(k, std::move(name));
        last().kernel = kernel;
        return *this;
    }
    Layer &last() {
        if (m_.layers.empty()) throw ModelError("ModelBuilder: add a layer before setting its fields");
        return m_.layers.back();
    }
    Model m_;
};

}  // namespace segtile
