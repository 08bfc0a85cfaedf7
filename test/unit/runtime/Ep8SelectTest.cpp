//===- Ep8SelectTest.cpp - selection rules on the shipped EP8 bundles -----===//
//
// The selection rules of docs/selection.md through the C API, on the
// bundles `moec compile` builds from the shipped tables
// tuning_tables/flash_ep8.table and pro_ep8.table (CTest
// runtime-ep8-select compiles them first, in its fixture ep8-bundles, and
// names their folder in MOEC_TEST_EP8_BUNDLES). The expected outcome of
// every key is computed here from the table file by brute force: the row
// with the smallest |m - M|, the larger one on a tie; above the largest
// row a miss when M exceeds a fused table's capacity (the smallest
// max_tokens of its kernels), else the largest row flagged as a fallback
// (above_max=largest) or a miss (above_max=error); the table of the
// smallest workspace class >= the request. The tests are hidden ([.]) from
// the plain runtime-unit run, which has no compiled bundle.
//
//===----------------------------------------------------------------------===//

#include "moec/moec_runtime.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

/// One `select` block of a table file, read independently of the compiler.
struct TableKey {
  std::string network;
  uint32_t ep = 0, workspace = 0;
  std::string aboveMax = "largest";
  std::vector<std::pair<uint32_t, std::string>> rows; // (m, config), in file order
  std::optional<uint32_t> capacity; // smallest max_tokens of its kernels
};

std::map<std::string, std::string> fieldsOf(std::istringstream &words) {
  std::map<std::string, std::string> fields;
  std::string word;
  while (words >> word)
    if (size_t eq = word.find('='); eq != std::string::npos)
      fields[word.substr(0, eq)] = word.substr(eq + 1);
  return fields;
}

std::vector<TableKey> readTable(const std::string &path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::map<std::string, uint32_t> maxTokens;          // kernel -> max_tokens
  std::map<std::string, std::vector<std::string>> configs; // config -> kernels
  std::vector<TableKey> tables;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string kind, name;
    words >> kind;
    if (kind == "kernel" || kind == "config")
      words >> name;
    std::map<std::string, std::string> fields = fieldsOf(words);
    if (kind == "kernel" && fields.count("max_tokens")) {
      maxTokens[name] = uint32_t(std::stoul(fields["max_tokens"]));
    } else if (kind == "config") {
      std::stringstream list(fields["kernels"]);
      for (std::string k; std::getline(list, k, ',');)
        configs[name].push_back(k);
    } else if (kind == "select") {
      TableKey table;
      table.network = fields["network"];
      table.ep = uint32_t(std::stoul(fields["ep"]));
      table.workspace = uint32_t(std::stoul(fields["workspace"]));
      if (fields.count("above_max"))
        table.aboveMax = fields["above_max"];
      tables.push_back(table);
    } else if (kind == "row") {
      REQUIRE(!tables.empty());
      tables.back().rows.emplace_back(uint32_t(std::stoul(fields["m"])),
                                      fields["config"]);
    }
  }
  for (TableKey &table : tables)
    for (const auto &row : table.rows)
      for (const std::string &kernel : configs[row.second])
        if (auto it = maxTokens.find(kernel); it != maxTokens.end())
          table.capacity = std::min(table.capacity.value_or(it->second), it->second);
  return tables;
}

/// What the rules say of M: a row (maybe a fallback) or a miss.
struct Expected {
  bool miss = false, fallback = false;
  uint32_t rowM = 0;
  std::string config, message;
};

Expected expectedOf(const TableKey &table, uint32_t m) {
  Expected e;
  uint32_t largest = 0;
  for (const auto &row : table.rows)
    largest = std::max(largest, row.first);
  const std::string key = table.network + " ep" + std::to_string(table.ep) +
                          " ws" + std::to_string(table.workspace);
  if (m > largest) {
    if (table.capacity && m > *table.capacity) {
      e.miss = true;
      e.message = key + ": m " + std::to_string(m) +
                  " is above the table's capacity of " +
                  std::to_string(*table.capacity) + " tokens per rank";
    } else if (table.aboveMax == "error") {
      e.miss = true;
      e.message = key + ": m " + std::to_string(m) +
                  " is above the largest row (m " + std::to_string(largest) +
                  ") and above_max is 'error'";
    } else {
      e.fallback = true;
      e.rowM = largest;
    }
  } else {
    uint32_t bestDistance = UINT32_MAX;
    for (const auto &row : table.rows) {
      const uint32_t d = row.first > m ? row.first - m : m - row.first;
      if (d < bestDistance || (d == bestDistance && row.first > e.rowM)) {
        bestDistance = d;
        e.rowM = row.first;
      }
    }
  }
  for (const auto &row : table.rows)
    if (!e.miss && row.first == e.rowM)
      e.config = row.second;
  return e;
}

std::string bundleDir() {
  const char *dir = std::getenv("MOEC_TEST_EP8_BUNDLES");
  INFO("MOEC_TEST_EP8_BUNDLES names the folder of flash_ep8.moeb and "
       "pro_ep8.moeb (CTest runtime-ep8-select sets it)");
  REQUIRE(dir != nullptr);
  return dir;
}

struct OpenBundle {
  moec_bundle_t *bundle = nullptr;
  explicit OpenBundle(const std::string &path) {
    INFO(path << ": " << moec_last_error_message());
    REQUIRE(moec_bundle_open(path.c_str(), &bundle) == MOEC_STATUS_OK);
  }
  ~OpenBundle() { moec_bundle_close(bundle); }
};

std::string configId(moec_bundle_t *bundle, uint32_t index) {
  moec_config_info_t info{};
  if (moec_bundle_config_info(bundle, index, &info) != MOEC_STATUS_OK)
    return "<bad config index " + std::to_string(index) + ">";
  return info.id;
}

/// Every M in 0..maxM of every table of `name`, through the C API.
void checkEveryKey(const std::string &name, uint32_t maxM) {
  const std::vector<TableKey> tables =
      readTable(std::string(MOEC_TEST_TABLES) + "/" + name + ".table");
  REQUIRE(tables.size() == 6); // two networks x three workspace classes
  OpenBundle open(bundleDir() + "/" + name + ".moeb");
  for (const TableKey &table : tables) {
    DYNAMIC_SECTION(table.network << " ws" << table.workspace) {
      moec_table_t handle{};
      REQUIRE(moec_bundle_resolve_table(open.bundle, table.network.c_str(),
                                        table.ep, table.workspace,
                                        &handle) == MOEC_STATUS_OK);
      std::vector<std::string> mismatches;
      uint32_t hits = 0, fallbacks = 0, misses = 0;
      for (uint32_t m = 0; m <= maxM; ++m) {
        const Expected want = expectedOf(table, m);
        moec_selection_t s{};
        const moec_status_t status = moec_bundle_select(open.bundle, handle, m, &s);
        std::ostringstream got;
        if (want.miss) {
          ++misses;
          const std::string message = moec_last_error_message();
          if (status != MOEC_STATUS_SELECTION_MISS ||
              message.find(want.message) == std::string::npos)
            got << moec_status_name(status) << " '" << message << "'";
        } else {
          want.fallback ? ++fallbacks : ++hits;
          if (status != MOEC_STATUS_OK)
            got << moec_status_name(status) << " '" << moec_last_error_message()
                << "'";
          else if (s.row_m != want.rowM || bool(s.fallback) != want.fallback ||
                   bool(s.exact) != (s.row_m == m) ||
                   configId(open.bundle, s.config) != want.config)
            got << "row " << s.row_m << " fallback " << int(s.fallback)
                << " exact " << int(s.exact) << " config "
                << configId(open.bundle, s.config);
        }
        if (!got.str().empty() && mismatches.size() < 10)
          mismatches.push_back(
              "m " + std::to_string(m) + ": " + got.str() + ", expected " +
              (want.miss ? "miss '" + want.message + "'"
                         : "row " + std::to_string(want.rowM) + " " + want.config +
                               (want.fallback ? " (fallback)" : "")));
      }
      INFO(name << " " << table.network << " ws" << table.workspace << ": "
                << hits << " hits, " << fallbacks << " fallbacks, " << misses
                << " misses");
      std::string listed;
      for (const std::string &mismatch : mismatches)
        listed += "\n  " + mismatch;
      INFO("first mismatches:" << listed);
      CHECK(mismatches.empty());
      // Each outcome the table's header promises occurs: the largest row
      // of each class is its workspace, fixed slot unfused falls back,
      // everything else refuses above its largest row.
      uint32_t largest = 0;
      for (const auto &row : table.rows)
        largest = std::max(largest, row.first);
      CHECK(largest == table.workspace);
      CHECK(hits == table.workspace + 1);
      const bool fused = table.capacity.has_value();
      CHECK(fused == (table.network.find("-fused") != std::string::npos));
      if (table.aboveMax == "largest" && !fused)
        CHECK(fallbacks == maxM - table.workspace);
      else
        CHECK(misses == maxM - table.workspace);
    }
  }
}

/// The tables of `network` answer requests for workspaces below, at and
/// above each class with the smallest class >= the request.
void checkWorkspaces(const std::string &name, const std::string &network) {
  const std::vector<TableKey> all =
      readTable(std::string(MOEC_TEST_TABLES) + "/" + name + ".table");
  std::vector<uint32_t> classes;
  for (const TableKey &t : all)
    if (t.network == network)
      classes.push_back(t.workspace);
  std::sort(classes.begin(), classes.end());
  REQUIRE(classes == std::vector<uint32_t>{1024, 8192, 16384});
  OpenBundle open(bundleDir() + "/" + name + ".moeb");
  std::vector<uint32_t> asks{0, 1};
  for (uint32_t c : classes)
    for (uint32_t a : {c - 1, c, c + 1})
      asks.push_back(a);
  for (uint32_t ask : asks) {
    INFO(network << " workspace " << ask);
    moec_table_t handle{};
    const moec_status_t status = moec_bundle_resolve_table(
        open.bundle, network.c_str(), 8, ask, &handle);
    auto bigger = std::lower_bound(classes.begin(), classes.end(), ask);
    if (bigger == classes.end()) {
      CHECK(status == MOEC_STATUS_NOT_FOUND);
      CHECK(std::string(moec_last_error_message())
                .find("no selection table for network '" + network +
                      "' ep 8 with workspace class >= " + std::to_string(ask) +
                      " (largest is 16384)") != std::string::npos);
      continue;
    }
    REQUIRE(status == MOEC_STATUS_OK);
    // The resolved table's class: its largest row is its workspace (checked
    // above), and M = class selects it exactly while M = class + 1 is past it.
    moec_selection_t s{};
    REQUIRE(moec_bundle_select(open.bundle, handle, *bigger, &s) == MOEC_STATUS_OK);
    CHECK(s.row_m == *bigger);
    CHECK(s.exact == 1);
    CHECK(s.fallback == 0);
  }
  // No EP8 table at another EP size.
  moec_table_t handle{};
  CHECK(moec_bundle_resolve_table(open.bundle, network.c_str(), 4, 1024,
                                  &handle) == MOEC_STATUS_NOT_FOUND);
}

} // namespace

TEST_CASE("EP8 Flash: every M 0..16400 of every table selects by the rules",
          "[.ep8-select]") {
  checkEveryKey("flash_ep8", 16400);
}

TEST_CASE("EP8 Pro: every M 0..16400 of every table selects by the rules",
          "[.ep8-select]") {
  checkEveryKey("pro_ep8", 16400);
}

TEST_CASE("EP8: workspace requests get the smallest class large enough",
          "[.ep8-select]") {
  checkWorkspaces("flash_ep8", "flash");
  checkWorkspaces("flash_ep8", "flash-fused");
  checkWorkspaces("pro_ep8", "dsv4-pro");
  checkWorkspaces("pro_ep8", "dsv4-pro-fused");
}

TEST_CASE("EP8: exact ties go to the larger row, by hand", "[.ep8-select]") {
  // Keys spelled out from the table files: rows 64 and 66 (tie at 65), 1152
  // and 2048 (tie at 1600 in the compact classes), 2048 and 4096 (3072).
  OpenBundle flash(bundleDir() + "/flash_ep8.moeb");
  OpenBundle pro(bundleDir() + "/pro_ep8.moeb");
  struct Case {
    moec_bundle_t *bundle;
    const char *network;
    uint32_t workspace, m, rowM;
    bool fallback;
  } cases[] = {
      {flash.bundle, "flash", 1024, 65, 66, false},
      {flash.bundle, "flash-fused", 1024, 65, 66, false},
      {pro.bundle, "dsv4-pro", 1024, 65, 66, false},
      {pro.bundle, "dsv4-pro-fused", 1024, 65, 66, false},
      {flash.bundle, "flash", 8192, 1600, 2048, false},
      {pro.bundle, "dsv4-pro-fused", 16384, 3072, 4096, false},
      {flash.bundle, "flash", 1024, 0, 1, false},
      {pro.bundle, "dsv4-pro", 1024, 100000, 1024, true},
  };
  for (const Case &c : cases) {
    INFO(c.network << " ws" << c.workspace << " m " << c.m);
    moec_table_t handle{};
    REQUIRE(moec_bundle_resolve_table(c.bundle, c.network, 8, c.workspace,
                                      &handle) == MOEC_STATUS_OK);
    moec_selection_t s{};
    REQUIRE(moec_bundle_select(c.bundle, handle, c.m, &s) == MOEC_STATUS_OK);
    CHECK(s.row_m == c.rowM);
    CHECK(bool(s.fallback) == c.fallback);
  }
}
