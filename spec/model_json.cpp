// JSON model files (models/*.json). Every problem becomes one ModelError that
// names the file, the layer and the field.
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "spec/environment.h"
#include "spec/model.h"

namespace segtile {

namespace {

using nlohmann::json;

// "conv2d, relu, ..." for messages.
std::string known_kinds() {
    std::string r;
    for (const LayerKindInfo &k : layer_kinds()) r += (r.empty() ? "" : ", ") + std::string(k.name);
    return r;
}

std::string where(const std::string &source, const std::string &model, int index, const std::string &layer) {
    std::string w = source + ": model '" + model + "', layer " + std::to_string(index);
    if (!layer.empty()) w += " '" + layer + "'";
    return w;
}

}  // namespace

Model parse_model_json(const std::string &text, const std::string &source) {
    json j;
    try {
        j = json::parse(text);
    } catch (const json::parse_error &e) {
        throw ModelError(source + ": not valid JSON (" + e.what() + "); fix the syntax at that position");
    }
    Model m;
    m.source = source;
    if (!j.is_object()) throw ModelError(source + ": the model must be a JSON object with \"name\" and \"layers\"");
    auto top_str = [&](const char *key) -> std::string {
        if (!j.contains(key)) throw ModelError(source + ": missing field \"" + key + "\" at the top level");
        if (!j[key].is_string()) throw ModelError(source + ": field \"" + key + "\" must be a string");
        return j[key].get<std::string>();
    };
    m.name = top_str("name");
    static const std::set<std::string> top_keys = {"name", "input_channels", "layers", "loss", "description"};
    for (auto it = j.begin(); it != j.end(); ++it)
        if (!top_keys.count(it.key()))
            throw ModelError(source + ": unknown top-level field \"" + it.key() +
                             "\"; expected name, input_channels, layers, loss, description");
    if (j.contains("input_channels")) {
        if (!j["input_channels"].is_number_integer())
            throw ModelError(source + ": \"input_channels\" must be an integer");
        m.input_channels = j["input_channels"].get<int>();
    }
    if (!j.contains("layers") || !j["layers"].is_array())
        throw ModelError(source + ": missing field \"layers\" (an array of layer objects)");

    int index = 0;
    for (const json &jl : j["layers"]) {
        Layer l;
        std::string name = jl.is_object() && jl.contains("name") && jl["name"].is_string() ? jl["name"].get<std::string>() : "";
        const std::string at = where(source, m.name, index, name);
        if (!jl.is_object()) throw ModelError(at + ": each layer must be a JSON object");
        if (name.empty()) throw ModelError(at + ": missing field \"name\" (a string)");
        l.name = name;
        if (!jl.contains("type") || !jl["type"].is_string())
            throw ModelError(at + ": missing field \"type\" (e.g. \"conv2d\", \"relu\")");
        auto kind = layer_kind_from_string(jl["type"].get<std::string>());
        if (!kind)
            throw ModelError(at + ": unknown layer type \"" + jl["type"].get<std::string>() + "\"; known: " +
                             known_kinds());
        l.kind = *kind;
        const LayerKindInfo &info = kind_info(l.kind);
        std::set<std::string> allowed = {"name", "type", "inputs", "params"};
        allowed.insert(info.required.begin(), info.required.end());
        allowed.insert(info.optional.begin(), info.optional.end());
        for (auto it = jl.begin(); it != jl.end(); ++it)
            if (!allowed.count(it.key()))
                throw ModelError(at + ": field \"" + it.key() + "\" does not apply to " + to_string(l.kind));
        for (const auto &r : info.required)
            if (!jl.contains(r)) throw ModelError(at + ": missing field \"" + r + "\" required by " + to_string(l.kind));

        if (jl.contains("inputs")) {
            const json &ji = jl["inputs"];
            if (ji.is_string()) l.inputs = {ji.get<std::string>()};
            else if (ji.is_array() && std::all_of(ji.begin(), ji.end(), [](const json &e) { return e.is_string(); }))
                l.inputs = ji.get<std::vector<std::string>>();
            else throw ModelError(at + ": field \"inputs\" must be a layer name or an array of layer names");
        }
        if (jl.contains("params")) {
            if (!jl["params"].is_string()) throw ModelError(at + ": field \"params\" must be a string (PyTorch module path)");
            l.param_prefix = jl["params"].get<std::string>();
        }
        for (auto it = jl.begin(); it != jl.end(); ++it) {
            const LayerField *f = find_layer_field(it.key());
            if (!f) continue;  // name, type, inputs, params
            const json &v = it.value();
            if (f->int_field) {
                if (!v.is_number_integer()) throw ModelError(at + ": field \"" + it.key() + "\" must be an integer");
                l.*f->int_field = v.get<int>();
            } else if (f->double_field) {
                if (!v.is_number()) throw ModelError(at + ": field \"" + it.key() + "\" must be a number");
                l.*f->double_field = v.get<double>();
            } else {
                if (!v.is_boolean()) throw ModelError(at + ": field \"" + it.key() + "\" must be true or false");
                l.*f->bool_field = v.get<bool>();
            }
        }
        if (info.stride_defaults_to_kernel && !jl.contains("stride")) l.stride = l.kernel;  // PyTorch's default
        m.layers.push_back(std::move(l));
        index++;
    }
    if (j.contains("loss")) {
        const json &jl = j["loss"];
        if (!jl.is_object() || !jl.contains("type") || !jl["type"].is_string())
            throw ModelError(source + ": \"loss\" must be an object with a \"type\" (softmax_cross_entropy or mse)");
        auto k = loss_kind_from_string(jl["type"].get<std::string>());
        if (!k) throw ModelError(source + ": unknown loss type \"" + jl["type"].get<std::string>() + "\"; use softmax_cross_entropy or mse");
        m.loss.kind = *k;
        if (jl.contains("input")) {
            if (!jl["input"].is_string()) throw ModelError(source + ": loss \"input\" must be a layer name");
            m.loss.input = jl["input"].get<std::string>();
        }
    }
    m.resolve();
    return m;
}

Model load_model_file(const std::string &path) {
    std::ifstream f(path);
    if (!f) throw ModelError(path + ": cannot open model file; check the path (shipped models are in " + models_dir() + ")");
    std::stringstream ss;
    ss << f.rdbuf();
    return parse_model_json(ss.str(), path);
}

std::string models_dir() {
    if (std::string d = environment::models_dir(); !d.empty()) return d;
#ifdef SEGTILE_MODELS_DIR
    return SEGTILE_MODELS_DIR;
#else
    return "models";
#endif
}

Model load_model(const std::string &name_or_path) {
    if (name_or_path.find('/') != std::string::npos || name_or_path.size() > 5 &&
                                                           name_or_path.substr(name_or_path.size() - 5) == ".json")
        return load_model_file(name_or_path);
    std::string path = models_dir() + "/" + name_or_path + ".json";
    std::ifstream probe(path);
    if (!probe) throw ModelError("no shipped model named '" + name_or_path + "' in " + models_dir() +
                                 "; give a model name from there or a path to a .json model file");
    return load_model_file(path);
}

}  // namespace segtile
