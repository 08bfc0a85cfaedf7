//===- CsvText.h - the plain CSV and number text moec's tools read -------===//
//
// The published-figure, model-check and AITER CSVs that moec reads have
// no quoted fields; these helpers are the one reading of them that
// `moec model-check` and `moec report` share.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_CSVTEXT_H
#define MOEC_COMPILER_CSVTEXT_H

#include <string>
#include <vector>

namespace moec::csv {

/// The whole file at `path`; false with "PATH: cannot read the file".
bool readText(const std::string &path, std::string &text, std::string &error);

/// The fields of one CSV line (no quoting): a trailing '\r' is dropped and
/// a trailing comma is an empty last field.
std::vector<std::string> fieldsOf(std::string line);

/// A whole-field finite number ("1.5", "2e3"); false for empty text,
/// trailing characters, infinities and NaN.
bool parseNumber(const std::string &text, double &value);

} // namespace moec::csv

#endif // MOEC_COMPILER_CSVTEXT_H
