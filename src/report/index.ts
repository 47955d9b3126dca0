/** The run comparison report (`ssl-train compare`): charts, embedding maps, HTML and PNG output. */
export { writeComparisonReport, type ComparisonOptions, type ComparisonReport } from './report.js';
export { loadReportRun, loadReportRuns, runStats, metricSeries, epochSeries, type ReportRun, type RunStats } from './run-data.js';
export { metricCharts, embeddingChart, RUN_COLORS, CLASS_COLORS, type ChartSpec } from './charts.js';
export { computeEmbedding, type Embedding, type EmbeddingOptions } from './embedding.js';
export { renderChartSvg, renderChartPng, reportHtml, type ReportModel } from './render.js';
