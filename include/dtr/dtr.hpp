// dtr: the one header a user program includes.
//
// Thread safety: see each included header.
#pragma once

#include "dtr/collectives.hpp"
#include "dtr/config.hpp"
#include "dtr/device.hpp"
#include "dtr/distributed.hpp"
#include "dtr/dtype.hpp"
#include "dtr/error.hpp"
#include "dtr/generator.hpp"
#include "dtr/graph.hpp"
#include "dtr/observability.hpp"
#include "dtr/op_table.hpp"
#include "dtr/process_group.hpp"
#include "dtr/stream.hpp"
#include "dtr/tensor.hpp"
