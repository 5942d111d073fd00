#include "io/csv.h"

#include <cerrno>
#include <cstring>
#include <fstream>

namespace segtile {

namespace {

std::string trim(const std::string &s) {
    const size_t b = s.find_first_not_of(" \t");
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

}  // namespace

std::vector<CsvRow> read_csv(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
    std::vector<CsvRow> rows;
    std::string text;
    for (int line = 1; std::getline(in, text); line++) {
        if (line == 1 && text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);  // spreadsheet BOM
        if (!text.empty() && text.back() == '\r') text.pop_back();
        if (trim(text).empty()) continue;
        CsvRow row{line, {}};
        std::string field;
        size_t i = 0;
        while (true) {
            field.clear();
            while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) i++;
            if (i < text.size() && text[i] == '"') {
                for (i++;; i++) {
                    if (i >= text.size())
                        throw std::runtime_error(path + ":" + std::to_string(line) +
                                                 ": unterminated quote; close the quoted name with \"");
                    if (text[i] == '"') {
                        if (i + 1 < text.size() && text[i + 1] == '"') {
                            field += '"';
                            i++;
                        } else {
                            break;
                        }
                    } else {
                        field += text[i];
                    }
                }
                i++;  // past the closing quote
                while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) i++;
                if (i < text.size() && text[i] != ',')
                    throw std::runtime_error(path + ":" + std::to_string(line) +
                                             ": text after a closing quote; put a comma after it");
                row.fields.push_back(field);
            } else {
                const size_t comma = text.find(',', i);
                row.fields.push_back(trim(text.substr(i, comma == std::string::npos ? std::string::npos : comma - i)));
                i = comma == std::string::npos ? text.size() : comma;
            }
            if (i >= text.size()) break;
            i++;  // past the comma
        }
        rows.push_back(std::move(row));
    }
    return rows;
}

}  // namespace segtile
