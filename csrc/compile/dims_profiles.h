/*
 * dims_profiles.h — dynamic dimension profiles (000 input_shape, dynamic_dims,
 * dynamic_node_type; 002 §5.6 "whole-graph profiles"): the set of input shapes a session
 * accepts, checked against the graph and against each run's feeds.  ("Profile" here is a
 * dynamic_dims gear, nothing to do with the profiler of exec/profile.c.)
 *
 * input_shape "data:1,1,40,-1;label:1,-1" names inputs and their shapes, -1 marking a profile
 * dim; dynamic_dims "20,20;40,40;80,60" gives, per profile, the sizes of those -1s in order:
 * profile 0 is data(1,1,40,20) + label(1,20).  A shape "0" is a scalar (000).
 *
 * dynamic_node_type 1 (placeholders): at a run, the first time (and until it passes), every
 * name must be a placeholder of the graph, the names in alphabetical order, and the shapes
 * agree with the placeholders' (rank, fixed dims; a -1 of input_shape must be -1 in the
 * placeholder); then the feeds of those placeholders must together be one profile's shapes.
 * dynamic_node_type 0 (dataset): the graph's one iterator_get_next must have one output per
 * entry, each of a fixed shape (a dataset whose element shape varies is refused), and the
 * element must be one of the profiles: a get_next binds elements of one shape per plan here.
 */
#ifndef NPU_DIMS_PROFILES_H
#define NPU_DIMS_PROFILES_H

#include "core/npu_int.h"

typedef struct npuP_dims npuP_dims;

#define NPUP_DIMS_OUTSIDE (-2) /* npuP_dims_match: compile_hybrid_mode, no profile's feeds */

/* The profile of a run, for the session's plan cache.  On the first call *dims is NULL: it is
   made from o when input_shape is set (owned by the caller: npuP_dims_free), and stays NULL
   (nothing to check) otherwise.  Then the checks above; *profile is the index of the profile
   the run's feeds are (the first one when several agree on the fed inputs), or -1 when the run
   feeds none of the named placeholders (or dynamic_node_type is 0), or NPUP_DIMS_OUTSIDE
   (compile_hybrid_mode 1) when the feeds are no profile but agree with input_shape's ranks and
   fixed dims: the run takes the dynamic-shape plan (npuP_dims_feeds with k < 0).
   Errors: NPU_ERR_OPTION (input_shape does not describe the graph: a name not a placeholder,
   the order, a shape),
   NPU_ERR_UNSUPPORTED (dataset inputs this device cannot bind per profile), NPU_ERR_SHAPE (the
   dataset's element is no profile), NPU_ERR_ARG (a feed is no profile: the message names the
   placeholder, its shape and the allowed shapes; with compile_hybrid_mode, a feed whose rank or
   fixed dims are not input_shape's), NPU_ERR_NOMEM.  No allocation once the
   first call passed. */
npu_status npuP_dims_match(npuP_dims **dims, npu_context *ctx, const npu_options *o,
                           const npu_graph *g, int n_feeds, const int *feeds,
                           npu_tensor *const *feed_tensors, int *profile);
int npuP_dims_n_profiles(const npuP_dims *d);
/* compile_hybrid_mode 1: feeds outside the profiles run one dynamic-shape plan. */
bool npuP_dims_hybrid(const npuP_dims *d);
/* The feeds of a run with the named placeholders' tensors replaced by stand-ins (shape only,
   no data) of profile k's shapes, for compiling that profile's plan (k < 0: input_shape's
   shapes, -1 at the profile dims, for compile_hybrid_mode's dynamic-shape plan): *out is
   borrowed, valid until the next call or npuP_dims_free.  Errors: NPU_ERR_NOMEM. */
npu_status npuP_dims_feeds(npuP_dims *d, npu_context *ctx, int k, int n_feeds, const int *feeds,
                           npu_tensor *const *feed_tensors, npu_tensor *const **out);
void npuP_dims_free(npu_context *ctx, npuP_dims *d);

#endif
