// Internal: the zmq backend, dtr's own transport (pg/zmq/zmq_backend.cpp): collectives and
// point to point over a Mesh (pg/zmq/mesh.hpp), with the same-host path (shm_path.hpp,
// p2p_ring.hpp) and two-rank lanes (lane.hpp). Every ProcessGroup has one: it carries the
// host tensors of "zmq" and "nccl" groups.
//
// Thread safety: as pg::Backend (any thread).
#pragma once

#include <memory>

#include "pg/backend.hpp"

namespace dtr::pg {

class Mesh;

// The zmq backend's world group over a connected mesh.
std::shared_ptr<Backend> make_zmq_world(std::shared_ptr<Mesh> mesh);

}  // namespace dtr::pg
