"""rgb_array frames of the built-in envs, drawn with NumPy only (no pygame, no display).

Each ``<env>(state_column, params)`` returns uint8[H, W, 3] resembling Gymnasium's picture of the same
state (same canvas size, geometry and colours; no anti-aliasing). Drawing uses y-up world pixels like
Gymnasium's pygame code and flips at the end.
"""

from __future__ import annotations

import math

import numpy as np


def _canvas(width: int, height: int) -> np.ndarray:
    return np.full((height, width, 3), 255, dtype=np.uint8)


def _grid(img, x0, x1, y0, y1):
    """Pixel-centre coordinates (y up) of the clipped box [x0, x1] x [y0, y1], and the image slice."""
    h, w = img.shape[:2]
    xa, xb = max(math.floor(x0), 0), min(math.ceil(x1) + 1, w)
    ya, yb = max(math.floor(y0), 0), min(math.ceil(y1) + 1, h)
    if xa >= xb or ya >= yb:
        return None
    ys, xs = np.mgrid[ya:yb, xa:xb]
    return xs + 0.5, ys + 0.5, (slice(h - yb, h - ya), slice(xa, xb))


def _paint(img, sl, inside, color):
    region = img[sl]
    region[inside[::-1]] = color


def polygon(img: np.ndarray, points, color) -> None:
    """Fill a convex polygon given as [(x, y), ...] in y-up pixel coordinates."""
    pts = np.asarray(points, dtype=np.float64)
    g = _grid(img, pts[:, 0].min(), pts[:, 0].max(), pts[:, 1].min(), pts[:, 1].max())
    if g is None:
        return
    px, py, sl = g
    nxt = np.roll(pts, -1, axis=0)
    cross = [(b[0] - a[0]) * (py - a[1]) - (b[1] - a[1]) * (px - a[0]) for a, b in zip(pts, nxt)]
    inside = np.all([c >= 0 for c in cross], axis=0) | np.all([c <= 0 for c in cross], axis=0)
    _paint(img, sl, inside, color)


def circle(img: np.ndarray, cx: float, cy: float, r: float, color) -> None:
    """Fill a disc of radius r centred at (cx, cy)."""
    g = _grid(img, cx - r, cx + r, cy - r, cy + r)
    if g is None:
        return
    px, py, sl = g
    _paint(img, sl, (px - cx) ** 2 + (py - cy) ** 2 <= r * r, color)


def line(img: np.ndarray, p0, p1, color, width: float = 1.0) -> None:
    """A straight segment of the given width."""
    (x0, y0), (x1, y1) = p0, p1
    length = math.hypot(x1 - x0, y1 - y0) or 1.0
    nx, ny = -(y1 - y0) / length * width / 2, (x1 - x0) / length * width / 2
    polygon(img, [(x0 + nx, y0 + ny), (x1 + nx, y1 + ny), (x1 - nx, y1 - ny), (x0 - nx, y0 - ny)], color)


def _rotated(coords, angle, dx, dy):
    """Rotate (counter-clockwise, radians) then translate, like pygame's Vector2.rotate_rad."""
    c, s = math.cos(angle), math.sin(angle)
    return [(x * c - y * s + dx, x * s + y * c + dy) for x, y in coords]


def cartpole(state, params) -> np.ndarray:
    """CartPole-v1: 600x400, black cart, brown pole, blue axle, track line."""
    width, height = 600, 400
    img = _canvas(width, height)
    scale = width / (2.4 * 2)
    polewidth, polelen = 10.0, scale * (2 * 0.5)
    cartwidth, cartheight = 50.0, 30.0
    cartx, carty, axleoffset = state[0] * scale + width / 2.0, 100.0, cartheight / 4.0
    l, r, t, b = -cartwidth / 2, cartwidth / 2, cartheight / 2, -cartheight / 2
    polygon(img, [(l + cartx, b + carty), (l + cartx, t + carty), (r + cartx, t + carty),
                  (r + cartx, b + carty)], (0, 0, 0))
    l, r, t, b = -polewidth / 2, polewidth / 2, polelen - polewidth / 2, -polewidth / 2
    polygon(img, _rotated([(l, b), (l, t), (r, t), (r, b)], -state[2], cartx, carty + axleoffset),
            (202, 152, 101))
    circle(img, cartx, carty + axleoffset, polewidth / 2, (129, 132, 203))
    line(img, (0, carty), (width, carty), (0, 0, 0))
    return img


def acrobot(state, params) -> np.ndarray:
    """Acrobot-v1: 500x500, two cyan links with yellow joints, goal line."""
    dim = 500
    img = _canvas(dim, dim)
    scale, offset = dim / (2.2 * 2), dim / 2
    p1 = (-1.0 * math.cos(state[0]) * scale, 1.0 * math.sin(state[0]) * scale)
    xys = [(0.0, 0.0), (p1[1], p1[0])]
    thetas = [state[0] - math.pi / 2, state[0] + state[1] - math.pi / 2]
    line(img, (-2.2 * scale + offset, 1 * scale + offset), (2.2 * scale + offset, 1 * scale + offset),
         (0, 0, 0))
    for (x, y), th in zip(xys, thetas):
        x, y = x + offset, y + offset
        l, r, t, b = 0, scale, 0.1 * scale, -0.1 * scale
        polygon(img, _rotated([(l, b), (l, t), (r, t), (r, b)], th, x, y), (0, 204, 204))
        circle(img, x, y, 0.1 * scale, (204, 204, 0))
    return img


def _mountain_car(pos, goal_position) -> np.ndarray:
    width, height = 600, 400
    img = _canvas(width, height)
    min_position, max_position = -1.2, 0.6
    scale = width / (max_position - min_position)

    def height_of(xs):
        return np.sin(3 * xs) * 0.45 + 0.55

    xs = np.linspace(min_position, max_position, 100)
    pts = list(zip((xs - min_position) * scale, height_of(xs) * scale))
    for p0, p1 in zip(pts[:-1], pts[1:]):
        line(img, p0, p1, (0, 0, 0), 2.0)
    clearance, carwidth, carheight = 10, 40, 20
    angle = math.cos(3 * pos)
    base_x, base_y = (pos - min_position) * scale, clearance + height_of(pos) * scale
    l, r, t, b = -carwidth / 2, carwidth / 2, carheight, 0
    polygon(img, _rotated([(l, b), (l, t), (r, t), (r, b)], angle, base_x, base_y), (0, 0, 0))
    for wx, wy in _rotated([(carwidth / 4, 0), (-carwidth / 4, 0)], angle, base_x, base_y):
        circle(img, wx, wy, carheight / 2.5, (128, 128, 128))
    flagx = (goal_position - min_position) * scale
    flagy1 = height_of(goal_position) * scale
    flagy2 = flagy1 + 50
    line(img, (flagx, flagy1), (flagx, flagy2), (0, 0, 0))
    polygon(img, [(flagx, flagy2), (flagx, flagy2 - 10), (flagx + 25, flagy2 - 5)], (204, 204, 0))
    return img


def mountain_car(state, params) -> np.ndarray:
    """MountainCar-v0: 600x400, hill curve, black car, grey wheels, yellow flag at 0.5."""
    return _mountain_car(state[0], 0.5)


def mountain_car_continuous(state, params) -> np.ndarray:
    """MountainCarContinuous-v0: like MountainCar-v0 with the flag at 0.45."""
    return _mountain_car(state[0], 0.45)


def pendulum(state, params) -> np.ndarray:
    """Pendulum-v1: 500x500, red rod from the centre pointing along theta (0 = up), black axle."""
    dim = 500
    img = _canvas(dim, dim)
    scale, offset = dim / (2.2 * 2), dim // 2
    rod_length, rod_width = 1 * scale, 0.2 * scale
    l, r, t, b = 0, rod_length, rod_width / 2, -rod_width / 2
    angle = state[0] + math.pi / 2
    polygon(img, _rotated([(l, b), (l, t), (r, t), (r, b)], angle, offset, offset), (204, 77, 77))
    circle(img, offset, offset, rod_width / 2, (204, 77, 77))
    end = (rod_length * math.cos(angle) + offset, rod_length * math.sin(angle) + offset)
    circle(img, end[0], end[1], rod_width / 2, (204, 77, 77))
    circle(img, offset, offset, 0.05 * scale, (0, 0, 0))
    return img
