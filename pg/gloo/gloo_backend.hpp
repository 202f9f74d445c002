// Internal: the gloo backend (pg/gloo/gloo_backend.cpp, built with DTR_WITH_GLOO from Debian's
// libgloo-dev; pg/gloo/no_gloo.cpp otherwise). Collectives are gloo's own algorithms over its
// TCP transport (one gloo context per group, connected through the rendezvous Store; a
// subgroup gets a context of its own); dtr's reduction kernels (pg/reduce.hpp) are gloo's
// reduce function, so bool, float16 and bfloat16 reduce as on zmq. reduce_scatter is an
// all_reduce of the concatenated inputs, of which each rank keeps its block (gloo has no
// reduce-scatter with a custom reduction). Point to point is LibraryGroup's header
// protocol over gloo's unbound buffers (slots); any-source receives use gloo's receive
// from a set of ranks.
//
// gloo's links are plain TCP: a non-loopback bind address is refused (AuthenticationError)
// unless the process is insecure (DTR_INSECURE=1), whether or not a cluster key is set,
// because gloo cannot use it. Timeouts: every gloo wait is bounded by Options::timeout;
// gloo closes every connection of a context when one of its waits times out, so a timeout
// (or any gloo error) leaves the group unusable (LibraryGroup's broken state).
//
// Thread safety: as pg::Backend.
#pragma once

#include <memory>
#include <string>

#include "pg/backend.hpp"

namespace dtr::pg {

// The world group of a gloo job: rendezvous through `store` (keys under
// "dtr-pg/<group_name>/gloo/"), gloo's TCP device bound to `bind_address`. Throws
// InvalidArgument when not built with gloo, AuthenticationError for a non-local address
// without insecure, TimeoutError / TransportError when the rendezvous fails.
std::shared_ptr<Backend> make_gloo_world(std::shared_ptr<Store> store, int rank, int world_size,
                                         const std::string& bind_address,
                                         const ProcessGroupOptions& options);

}  // namespace dtr::pg
