// Every program's and every subcommand's flags, each declared once (name, value, default, one
// line of help): the parsers take them from here and --help prints them (bin/flags.hpp).
#pragma once

#include <string>
#include <vector>

#include "bin/flags.hpp"

namespace hogstream {

// hogstream's subcommands, in the order `hogstream --help` lists them.
const std::vector<Command>& HogstreamCommands();
// One of them by name ("train"); null for a name that is not there.
const Command* FindHogstreamCommand(const std::string& name);
// The same where the name is the program's own: Bug if it is not there.
const Command& HogstreamCommand(const std::string& name);
// hogwild.bin, or the same program as `program` (gpus.bin).
Command HogwildBinCommand(const std::string& program);
const Command& RawBinCommand();

}  // namespace hogstream
