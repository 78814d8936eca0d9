/**
 * Writes the daemon's OpenAPI document (derived from `@palyra/transport-http`'s `Api`, exactly as
 * `GET /openapi.json` serves it) to stdout, for `openapi-typescript`.
 */
import * as OpenApi from "@effect/platform/OpenApi"
import { Api } from "@palyra/transport-http"

process.stdout.write(JSON.stringify(OpenApi.fromApi(Api.Api), null, 2))
