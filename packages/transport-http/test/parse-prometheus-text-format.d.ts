declare module "parse-prometheus-text-format" {
  /** Parses Prometheus' text exposition format into metric families (prom2json's shape). */
  export default function parsePrometheusTextFormat(text: string): Array<unknown>
}
