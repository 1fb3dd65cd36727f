"""Hand-written SVG line plots for the benchmark scripts (no plotting library on the
machines they run on): `svg_plot` draws named series of (x, y) points with optional log
axes. Imported by scripts/bench-vs-bookkeeper, scripts/bench-ledgers and scripts/bench-stored
through PYTHONPATH=scripts/lib, so that every plot in docs/perf/ looks the same."""


def svg_plot(path, title, xlabel, ylabel, series, xlog=False, xticks=None, xticklabels=None, ylog=False):
    import math
    W, H, L, R, T, B = 720, 440, 80, 250, 40, 60
    pts = [p for _, _, ps in series for p in ps]
    if not pts: return
    fx = (lambda x: math.log10(x)) if xlog else (lambda x: x)
    xs = [fx(p[0]) for p in pts]; ys = [p[1] for p in pts]
    x0, x1 = min(xs), max(xs)
    if x1 == x0: x1 = x0 + 1
    X = lambda x: L + (fx(x) - x0) / (x1 - x0) * (W - L - R)
    if ylog:
        ly0 = math.floor(math.log10(max(min(ys), 1e-3))); ly1 = math.ceil(math.log10(max(ys)))
        if ly1 == ly0: ly1 += 1
        Y = lambda y: H - B - (math.log10(max(y, 1e-3)) - ly0) / (ly1 - ly0) * (H - T - B)
        yticks = [10 ** e for e in range(ly0, ly1 + 1)]
    else:
        y1 = max(ys) * 1.1 or 1
        Y = lambda y: H - B - y / y1 * (H - T - B)
        yticks = [y1 * i / 5 for i in range(6)]
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W/2 - R/2}" y="22" text-anchor="middle" font-size="14">{title}</text>',
         f'<line x1="{L}" y1="{H-B}" x2="{W-R}" y2="{H-B}" stroke="black"/>',
         f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H-B}" stroke="black"/>',
         f'<text x="{(L + W - R)/2}" y="{H-15}" text-anchor="middle">{xlabel}</text>',
         f'<text x="18" y="{(T + H - B)/2}" text-anchor="middle" transform="rotate(-90 18 {(T + H - B)/2})">{ylabel}</text>']
    for v in yticks:
        y = Y(v)
        o.append(f'<line x1="{L}" y1="{y:.1f}" x2="{W-R}" y2="{y:.1f}" stroke="#ddd"/>')
        o.append(f'<text x="{L-6}" y="{y+4:.1f}" text-anchor="end">{v:.3g}</text>')
    for xv, xl in zip(xticks or [], xticklabels or []):
        o.append(f'<text x="{X(xv):.1f}" y="{H-B+18}" text-anchor="middle">{xl}</text>')
        o.append(f'<line x1="{X(xv):.1f}" y1="{H-B}" x2="{X(xv):.1f}" y2="{H-B+5}" stroke="black"/>')
    for n, (name, color, ps) in enumerate(series):
        ps = sorted(ps)
        o.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="' +
                 " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in ps) + '"/>')
        for x, y in ps:
            o.append(f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="3" fill="{color}"/>')
        ly = T + 10 + n * 20
        o.append(f'<line x1="{W-R+15}" y1="{ly}" x2="{W-R+35}" y2="{ly}" stroke="{color}" stroke-width="2"/>')
        o.append(f'<text x="{W-R+40}" y="{ly+4}">{name}</text>')
    o.append("</svg>")
    open(path, "w").write("\n".join(o) + "\n")
