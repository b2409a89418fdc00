// CUDA_VISIBLE_DEVICES among a Remora session's devices, as CUDA applies it among a machine's
// (docs/COMPATIBILITY.md, "CUDA_VISIBLE_DEVICES"). Pure; unit-tested in
// tests/unit/visible_devices_test.cc.
#pragma once

#include <string>
#include <vector>

namespace remora::shim {

// The devices `value` makes visible, as indices into `uuids` (the session's devices in their
// enumeration order, each as NVML and nvidia-smi print it: "GPU-xxxxxxxx-xxxx-..."), in the
// order `value` names them. The rules are CUDA's as PyTorch reproduces them
// (torch.cuda._parse_visible_devices, _device_count_nvml), so the two always agree:
//  * a comma-separated list of indices, each read as strtoul reads it after blanks ("1a" is
//    1); the first that is not a number ends the list, an index named twice makes none
//    visible, and the first index past the last device ends the list there;
//  * or a list of UUIDs, each "GPU-" followed by as much of the UUID as makes it unique; the
//    first entry that is not "GPU-..." ends the list, as does the first that matches no device
//    or several; an entry or a device named twice makes none visible;
//  * "MIG-" entries are matched like "GPU-" ones, by the UUID that follows: the driver names a
//    GPU by "MIG-" and its UUID (measured on an H200 without MIG), and a session has no MIG
//    instances, so any other MIG UUID matches nothing (PyTorch leaves MIG lists to CUDA);
//  * an empty value: none visible.
// `named_twice`, when given, tells whether none is visible because a device was named twice
// (CUDA then answers cudaErrorInvalidDevice, not cudaErrorNoDevice).
std::vector<int> VisibleDevices(const std::string& value, const std::vector<std::string>& uuids,
                                bool* named_twice = nullptr);

// The text form of a 16-byte UUID: "GPU-" and the 8-4-4-4-12 lower-case hex groups.
std::string UuidText(const unsigned char uuid[16]);

}  // namespace remora::shim
