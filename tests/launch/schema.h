// The pinned flag and key lists of the frameworks Frenzy launches (tests/data/launch/*.schema,
// read from each framework's own argument parser or config schema, with their sources), and a
// checker that every flag, key and value a launch emits is one of them.
#ifndef FRENZY_TESTS_LAUNCH_SCHEMA_H_
#define FRENZY_TESTS_LAUNCH_SCHEMA_H_

#include <map>
#include <string>
#include <vector>

#include "launch/launch.h"

namespace frenzy::testing {

struct Entry {
  std::string kind;                  // int, float, bool, str, list, flag, choice
  std::vector<std::string> choices;  // kind == choice
};

// One schema file: entries per part ("" for the framework's own, "launcher" for torchrun or
// deepspeed's launcher, "script" for arguments a library adds to the user's script, "cli" and
// "config" for Accelerate).
struct Schema {
  std::map<std::string, std::map<std::string, Entry>> parts;
  const Entry* Find(const std::string& part, const std::string& name) const;
};
Schema LoadSchema(const std::string& framework);

// Every problem of launch `l` against the schema of its framework ("--foo: not a flag of
// megatron", "zero_optimization.stage = 5: not one of 0 1 2 3"); empty when it conforms.
std::vector<std::string> Check(const Launch& l, const Schema& s);

}  // namespace frenzy::testing

#endif  // FRENZY_TESTS_LAUNCH_SCHEMA_H_
