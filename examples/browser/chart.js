/**
 * The live chart on a plain canvas: the training loss (left axis) and the throughput in
 * images per second (right axis) against the step.
 */
export function drawChart(canvas, history) {
  const context = canvas.getContext('2d');
  const { width, height } = canvas;
  const pad = { left: 56, right: 64, top: 16, bottom: 28 };
  context.clearRect(0, 0, width, height);
  context.font = '12px system-ui, sans-serif';
  context.fillStyle = '#546e7a';
  if (history.length === 0) {
    context.fillText('loss and images/s appear here once training runs', pad.left, height / 2);
    return;
  }
  const steps = history.map((h) => h.step);
  const [x0, x1] = [Math.min(...steps), Math.max(...steps, Math.min(...steps) + 1)];
  const x = (step) => pad.left + ((step - x0) / (x1 - x0)) * (width - pad.left - pad.right);
  const series = (key, colour, side) => {
    const values = history.map((h) => h[key]).filter(Number.isFinite);
    if (values.length === 0) return;
    const lo = Math.min(...values);
    const hi = Math.max(...values, lo + 1e-6);
    const y = (v) => height - pad.bottom - ((v - lo) / (hi - lo)) * (height - pad.top - pad.bottom);
    context.strokeStyle = colour;
    context.lineWidth = 2;
    context.beginPath();
    history.forEach((h, i) => (i === 0 ? context.moveTo(x(h.step), y(h[key])) : context.lineTo(x(h.step), y(h[key]))));
    context.stroke();
    context.fillStyle = colour;
    const at = side === 'left' ? 4 : width - pad.right + 6;
    context.fillText(hi.toPrecision(4), at, pad.top + 8);
    context.fillText(lo.toPrecision(4), at, height - pad.bottom);
    context.fillText(key === 'loss' ? 'loss' : 'images/s', at, height / 2);
  };
  series('loss', '#1565c0', 'left');
  series('imagesPerSecond', '#ef6c00', 'right');
  context.fillStyle = '#546e7a';
  context.fillText(`step ${x0}`, pad.left, height - 8);
  context.fillText(`step ${x1}`, width - pad.right - 48, height - 8);
}
