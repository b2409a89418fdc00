// Device-wide operations both ABIs answer, on the calling thread's current device: the
// runtime's cudaDeviceSynchronize, cudaDeviceReset and cudaDevice{En,Dis}ablePeerAccess and the
// driver facade's cuCtxSynchronize, cuDevicePrimaryCtxReset and cuCtx{En,Dis}ablePeerAccess
// (which make the context's device current around the call: driver::CallOnDevice) call down to
// these and convert the Status at their own boundary. Thread-safe.
#pragma once

#include "remora/base/status.h"

namespace remora::shim {

class Client;

// Waits for all work of the device, then takes the link's first asynchronous error and
// refreshes what managed memory the host may have cached (AfterSync). Answered without a
// round trip when nothing was sent since the device's last synchronisation completed.
Status SynchronizeDevice();
// Ends everything the session holds on the device (its memory, streams, events, modules) and
// forgets it in the client's tables.
Status ResetDevice();
// Enables or disables the current device's access to `peer`'s memory; two devices of two
// Remora servers are never peers.
Status SetPeerAccess(int peer, bool enable, const char* call);
// After a call `c` answered that waited for the device's work (`st`, its status): the
// managed-memory steps of a synchronisation, then the link's first asynchronous error.
Status AfterSync(Client* c, const Status& st);

}  // namespace remora::shim
