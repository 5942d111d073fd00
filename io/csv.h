// A small CSV reader for label files: comma-separated fields, optionally
// "quoted" (a doubled "" inside quotes is one "), trimmed of spaces; blank
// lines skipped; a UTF-8 byte-order mark and \r\n line ends accepted.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace segtile {

struct CsvRow {
    int line = 0;  // 1-based line number in the file
    std::vector<std::string> fields;
};

// Throws std::runtime_error "<path>:<line>: ..." for an unterminated quote
// or text after a closing quote, and "<path>: ..." if it cannot be read.
std::vector<CsvRow> read_csv(const std::string &path);

}  // namespace segtile
