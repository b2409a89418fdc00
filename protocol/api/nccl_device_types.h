// NCCL 2.28's device API types for the generated NCCL code (`include` in nccl.api): the host
// functions of nccl_device/*.h take and return them (ncclTeam_t, ncclDevComm_t, the
// requirement and handle structs). impl/comm__types.h declares every one of them and, unlike
// nccl_device.h, compiles in host C++ without NVCC.
#pragma once

#include <nccl.h>
#include <nccl_device/impl/comm__types.h>
