/**
 * `@palyra/transport-grpc`: the Gateway over gRPC, gRPC-Web and Connect (`palyra.v1`), with the
 * generated protobuf-es messages and service descriptors for typed clients.
 *
 * @since 0.1.0
 */
export * as GrpcTransport from "./GrpcTransport.js"
export * as HealthProto from "./gen/grpc/health/v1/health_pb.js"
export * as Proto from "./gen/palyra/v1/gateway_pb.js"
