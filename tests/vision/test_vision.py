"""smart_resize must equal qwen-vl-utils'; frames must map boxes exactly and reversibly."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qwen_vl_utils.vision_process import smart_resize as reference_smart_resize

from vlrl.vision import Frame, smart_resize

PIXEL_LIMITS = [(4 * 28 * 28, 16384 * 28 * 28), (3136, 12845056), (56 * 56, 224 * 224), (256 * 28 * 28, 1280 * 28 * 28)]


@pytest.mark.parametrize("min_pixels,max_pixels", PIXEL_LIMITS)
def test_smart_resize_equals_qwen_vl_utils_on_a_grid_of_sizes(min_pixels, max_pixels):
    sizes = [1, 13, 27, 28, 29, 55, 56, 100, 223, 224, 225, 427, 480, 640, 1000, 1080, 1920, 4000]
    for height, width in itertools.product(sizes, sizes):
        if max(height, width) / min(height, width) > 200:
            continue
        expected = reference_smart_resize(height, width, 28, min_pixels=min_pixels, max_pixels=max_pixels)
        assert smart_resize(height, width, 28, min_pixels, max_pixels) == expected, (height, width)


@settings(max_examples=400, deadline=None)
@given(
    height=st.integers(1, 8000),
    width=st.integers(1, 8000),
    limits=st.sampled_from(PIXEL_LIMITS),
    factor=st.sampled_from([28, 32]),
)
def test_smart_resize_equals_qwen_vl_utils_on_random_sizes(height, width, limits, factor):
    min_pixels, max_pixels = limits
    try:
        expected = reference_smart_resize(height, width, factor, min_pixels=min_pixels, max_pixels=max_pixels)
    except ValueError:
        with pytest.raises(ValueError):
            smart_resize(height, width, factor, min_pixels, max_pixels)
        return
    assert smart_resize(height, width, factor, min_pixels, max_pixels) == expected


def test_absolute_frame_uses_the_resized_image_size():
    frame = Frame.for_image("absolute", width=640, height=427, min_pixels=3136, max_pixels=12845056, factor=28)
    assert (frame.model_width, frame.model_height) == (644, 420)
    assert frame.box_to_model([100, 50, 320, 213.5]) == [101, 49, 322, 210]
    # VLM-R1 scales a predicted box back with x / input_width * image_width.
    assert frame.box_to_original([101, 49, 322, 210]) == [
        101 / 644 * 640,
        49 / 420 * 427,
        322 / 644 * 640,
        210 / 420 * 427,
    ]


def test_norm1000_frame_maps_to_thousandths_of_the_original_size():
    frame = Frame.for_image("norm1000", width=640, height=480, min_pixels=3136, max_pixels=12845056)
    assert frame.box_to_model([64, 48, 320, 240]) == [100, 100, 500, 500]
    assert frame.box_to_original([100, 100, 500, 500]) == [64.0, 48.0, 320.0, 240.0]


def test_original_frame_is_the_identity():
    frame = Frame.for_image("original", width=333, height=211, min_pixels=3136, max_pixels=12845056)
    box = [0.1, 7.3, 332.9, 210.0]
    assert frame.box_to_original(box) == box
    assert frame.point_to_original([5, 6]) == [5.0, 6.0]


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(["absolute", "norm1000"]),
    width=st.integers(28, 3000),
    height=st.integers(28, 3000),
    fx=st.floats(0, 1),
    fy=st.floats(0, 1),
)
def test_a_point_survives_the_round_trip_through_the_model_frame(kind, width, height, fx, fy):
    frame = Frame.for_image(kind, width, height, 3136, 12845056, 28)
    x, y = fx * width, fy * height
    back = frame.point_to_original(frame.point_to_model([x, y], integer=False))
    assert back == pytest.approx([x, y], abs=1e-6)


def test_an_aspect_ratio_of_exactly_200_is_resized_as_qwen_vl_utils_does_and_201_refused_by_both():
    assert smart_resize(28, 5600, 28, 784, 10**8) == reference_smart_resize(28, 5600, 28, 784, 10**8)
    for resize in (smart_resize, reference_smart_resize):
        with pytest.raises(ValueError, match="aspect ratio"):
            resize(28, 5628, 28, 784, 10**8)


def test_transparent_pixels_are_put_over_white_as_qwen_vl_utils_does():
    from PIL import Image
    from qwen_vl_utils.vision_process import to_rgb as reference_to_rgb

    from vlrl.vision.images import to_rgb

    image = Image.new("RGBA", (2, 1), (255, 0, 0, 0))
    image.putpixel((1, 0), (0, 0, 255, 255))
    assert list(to_rgb(image).getdata()) == list(reference_to_rgb(image).getdata()) == [(255, 255, 255), (0, 0, 255)]


def test_an_image_of_exactly_the_pixel_limit_opens_and_one_pixel_more_is_refused(tmp_path):
    from PIL import Image

    from vlrl.vision.images import ImageTooLarge, open_image

    Image.new("RGB", (10, 10)).save(tmp_path / "a.png")
    with open_image(tmp_path / "a.png", 100) as image:
        assert image.size == (10, 10)
    with pytest.raises(ImageTooLarge, match="has 10x10 pixels, more than the limit of 99"):
        open_image(tmp_path / "a.png", 99)
