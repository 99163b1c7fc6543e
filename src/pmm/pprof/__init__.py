"""pprof profiles of a process's heap (gzipped profile.proto).

`build_profile` and `write_profile` (in `pmm.pprof.heap`) encode PprofSample
stacks with the protobuf library's code generated from profile.proto.

Vendored: profile.proto is google/pprof's proto/profile.proto, unchanged
(Apache-2.0: its header, and LICENSE.profile.proto, google/pprof's LICENSE),
as of https://github.com/google/pprof commit
101d87ff5bc37124090081eb492825d9439a6a53 (2025-08-30, its last change; the
same at b9395ee17fa0d0013c3fd96ac9482318422ac337, 2026-07-09): git blob
128b546b7458b011e271e9db384e39e4d209c408, which tests/host/test_pprof.py
checks. profile_pb2.py and profile_pb2.pyi are generated from it by
grpcio-tools 1.85.1 (protobuf gencode 7.35.1), from this directory:

    python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. profile.proto
"""

from pmm.pprof.heap import (
    LOST_DEFAULT_SAMPLE_TYPE,
    LOST_SAMPLE_TYPES,
    UNKNOWN_STACK,
    LostSample,
    PprofFrame,
    PprofLine,
    PprofSample,
    build_profile,
    write_profile,
)

__all__ = [
    "LOST_DEFAULT_SAMPLE_TYPE",
    "LOST_SAMPLE_TYPES",
    "UNKNOWN_STACK",
    "LostSample",
    "PprofFrame",
    "PprofLine",
    "PprofSample",
    "build_profile",
    "write_profile",
]
